package revision

// String names the era as the tests' tables do.
func (e Era) String() string {
	if e == Modern {
		return ModernVersion
	}
	return "legacy"
}

package authn

// len is how many verified tokens the cache holds (tests).
func (c *tokenCache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

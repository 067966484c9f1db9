package config

import (
	"fmt"
	"strings"
)

// expansion is the result of expanding one string.
type expansion struct {
	value   string
	missing []string // variables referenced without a default and not set
}

// expand replaces ${VAR} and ${VAR:-default} in s with values from lookup
// and $$ with a literal $. A $ followed by anything else is kept as it is.
// ${VAR:-default} uses default when VAR is unset or empty; the default may
// itself contain references. An unset variable without a default is listed
// in missing (and expands to ""). Malformed references are an error.
func expand(s string, lookup func(string) (string, bool)) (expansion, error) {
	if !strings.Contains(s, "$") {
		return expansion{value: s}, nil
	}
	var b strings.Builder
	var res expansion
	for i := 0; i < len(s); {
		c := s[i]
		if c != '$' || i+1 >= len(s) {
			b.WriteByte(c)
			i++
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i += 2
		case '{':
			end := closingBrace(s, i+2)
			if end < 0 {
				return res, fmt.Errorf("unterminated %q (want ${NAME} or ${NAME:-default}; write $$ for a literal $)", s[i:])
			}
			body := s[i+2 : end]
			name, def, hasDef := strings.Cut(body, ":-")
			if !validVarName(name) {
				if name == "" {
					return res, fmt.Errorf("empty variable name in %q", s[i:end+1])
				}
				return res, fmt.Errorf("%q is not a supported reference (want ${NAME} or ${NAME:-default} with NAME of letters, digits and _; write $$ for a literal $)", s[i:end+1])
			}
			val, ok := lookup(name)
			if hasDef {
				d, err := expand(def, lookup)
				if err != nil {
					return res, err
				}
				if !ok || val == "" {
					val = d.value
					res.missing = append(res.missing, d.missing...)
				}
			} else if !ok {
				res.missing = append(res.missing, name)
			}
			b.WriteString(val)
			i = end + 1
		default:
			b.WriteByte('$')
			i++
		}
	}
	res.value = b.String()
	return res, nil
}

// closingBrace returns the index of the } that closes a ${ whose body starts
// at start, allowing nested ${...} in defaults, or -1.
func closingBrace(s string, start int) int {
	depth := 0
	for j := start; j < len(s); j++ {
		switch {
		case s[j] == '$' && j+1 < len(s) && s[j+1] == '$':
			j++
		case s[j] == '$' && j+1 < len(s) && s[j+1] == '{':
			depth++
			j++
		case s[j] == '}':
			if depth == 0 {
				return j
			}
			depth--
		}
	}
	return -1
}

func validVarName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		switch {
		case r == '_', 'A' <= r && r <= 'Z', 'a' <= r && r <= 'z':
		case '0' <= r && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

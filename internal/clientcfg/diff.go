package clientcfg

import (
	"fmt"
	"strings"
)

// Diff returns a unified diff (3 lines of context) from a to b, labelled
// with the two names; "" when they are equal.
func Diff(a, b []byte, nameA, nameB string) string {
	if string(a) == string(b) {
		return ""
	}
	x, y := splitLines(string(a)), splitLines(string(b))
	// Edits are local: strip the common head and tail, then LCS the rest.
	pre := 0
	for pre < len(x) && pre < len(y) && x[pre] == y[pre] {
		pre++
	}
	suf := 0
	for suf < len(x)-pre && suf < len(y)-pre && x[len(x)-1-suf] == y[len(y)-1-suf] {
		suf++
	}
	mx, my := x[pre:len(x)-suf], y[pre:len(y)-suf]
	type op struct {
		kind byte // ' ', '-', '+'
		line string
	}
	var ops []op
	for _, l := range x[:pre] {
		ops = append(ops, op{' ', l})
	}
	if len(mx)*len(my) > 4_000_000 { // too big for the table: all out, all in
		for _, l := range mx {
			ops = append(ops, op{'-', l})
		}
		for _, l := range my {
			ops = append(ops, op{'+', l})
		}
	} else {
		n, m := len(mx), len(my)
		lcs := make([][]int32, n+1)
		for i := range lcs {
			lcs[i] = make([]int32, m+1)
		}
		for i := n - 1; i >= 0; i-- {
			for j := m - 1; j >= 0; j-- {
				if mx[i] == my[j] {
					lcs[i][j] = lcs[i+1][j+1] + 1
				} else {
					lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
				}
			}
		}
		i, j := 0, 0
		for i < n || j < m {
			switch {
			case i < n && j < m && mx[i] == my[j]:
				ops = append(ops, op{' ', mx[i]})
				i, j = i+1, j+1
			case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
				ops = append(ops, op{'+', my[j]})
				j++
			default:
				ops = append(ops, op{'-', mx[i]})
				i++
			}
		}
	}
	for _, l := range x[len(x)-suf:] {
		ops = append(ops, op{' ', l})
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", nameA, nameB)
	const ctx = 3
	for k := 0; k < len(ops); {
		if ops[k].kind == ' ' {
			k++
			continue
		}
		// a hunk: from ctx lines before this change to ctx lines after
		// the last change less than 2*ctx lines from the previous one
		start := max(k-ctx, 0)
		end := k
		for e := k; e < len(ops); e++ {
			if ops[e].kind != ' ' {
				end = e
			} else if e-end > 2*ctx {
				break
			}
		}
		end = min(end+ctx+1, len(ops))
		la, lb := 1, 1
		for _, o := range ops[:start] {
			if o.kind != '+' {
				la++
			}
			if o.kind != '-' {
				lb++
			}
		}
		na, nb := 0, 0
		for _, o := range ops[start:end] {
			if o.kind != '+' {
				na++
			}
			if o.kind != '-' {
				nb++
			}
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(la, na), hunkRange(lb, nb))
		for _, o := range ops[start:end] {
			out.WriteByte(o.kind)
			out.WriteString(o.line)
			if !strings.HasSuffix(o.line, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		k = end
	}
	return out.String()
}

func hunkRange(start, n int) string {
	if n == 0 {
		start--
	}
	if n == 1 {
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}

// splitLines splits s after each newline, keeping them.
func splitLines(s string) []string {
	var l []string
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			l = append(l, s)
			break
		}
		l = append(l, s[:i+1])
		s = s[i+1:]
	}
	return l
}

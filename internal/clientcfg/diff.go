package clientcfg

import (
	"fmt"
	"strings"

	"github.com/mcpvisor/mcpvisor/internal/redact"
)

// Diff returns a unified diff (3 lines of context) from a to b, labelled
// with the two names; "" when they are equal. It shows every byte: for a
// file that may hold secrets, DiffRedacted.
func Diff(a, b []byte, nameA, nameB string) string {
	if string(a) == string(b) {
		return ""
	}
	x, y := splitLines(string(a)), splitLines(string(b))
	return unified(x, y, x, y, nameA, nameB)
}

// DiffRedacted is Diff of two versions of a file of format f (a client's
// file, or mcpvisor's config: FormatMCPServers), for the user to read:
// the lines that differ are found in the versions themselves, and printed
// redacted (redact.Files): env and header values, secrets in args and
// URLs, are not shown; a secret that changed shows as
// redact.RedactionChanged. A version that does not parse cannot be
// redacted: the diff then says so and shows no line.
func DiffRedacted(a, b []byte, f Format, nameA, nameB string) string {
	if string(a) == string(b) {
		return ""
	}
	syntax := redact.JSON
	if f == FormatCodex {
		syntax = redact.TOML
	}
	ra, rb, err := redact.Files(a, b, syntax)
	if err != nil {
		return fmt.Sprintf("--- %s\n+++ %s\n(the change is not shown: it does not parse as %s (%v), so its secrets cannot be told)\n", nameA, nameB, f, err)
	}
	x, y, showX, showY := splitLines(string(a)), splitLines(string(b)), splitLines(string(ra)), splitLines(string(rb))
	if len(showX) != len(x) || len(showY) != len(y) { // redact.Files keeps the lines: never
		return fmt.Sprintf("--- %s\n+++ %s\n(the change is not shown: its redaction lost lines)\n", nameA, nameB)
	}
	return unified(x, y, showX, showY, nameA, nameB)
}

// unified writes the unified diff from lines x to lines y, each shown as
// the line of the same index in showX or showY (as many).
func unified(x, y, showX, showY []string, nameA, nameB string) string {
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
	for i := range pre {
		ops = append(ops, op{' ', showX[i]})
	}
	if len(mx)*len(my) > 4_000_000 { // too big for the table: all out, all in
		for i := range mx {
			ops = append(ops, op{'-', showX[pre+i]})
		}
		for j := range my {
			ops = append(ops, op{'+', showY[pre+j]})
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
				ops = append(ops, op{' ', showX[pre+i]})
				i, j = i+1, j+1
			case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]): // what goes before what comes
				ops = append(ops, op{'-', showX[pre+i]})
				i++
			default:
				ops = append(ops, op{'+', showY[pre+j]})
				j++
			}
		}
	}
	for i := len(x) - suf; i < len(x); i++ {
		ops = append(ops, op{' ', showX[i]})
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

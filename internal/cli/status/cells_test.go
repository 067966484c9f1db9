package status

import (
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/clientbook"
)

// The CLIENTS cell's width is counted in characters, as tabwriter aligns
// the columns: names that fit in 24 characters are shown even when they
// take more bytes.
func TestClientsCellCountsCharacters(t *testing.T) {
	ten := strings.Repeat("é", 10) // 10 characters, 20 bytes
	cases := []struct {
		names []string
		want  string
	}{
		{nil, "-"},
		{[]string{"claude-ai", "cursor"}, "claude-ai,cursor"},
		{[]string{ten, ten}, ten + "," + ten},
		{[]string{ten, ten, "abcd"}, "3 clients"},
		{[]string{strings.Repeat("a", 25)}, "1 client"},
	}
	for _, c := range cases {
		var cs []clientbook.Use
		for _, n := range c.names {
			cs = append(cs, clientbook.Use{Name: n})
		}
		if got := clientsCell(cs); got != c.want {
			t.Errorf("clientsCell(%q) = %q, want %q", c.names, got, c.want)
		}
	}
}

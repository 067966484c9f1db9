package dashboard

import (
	"bytes"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/proc"
)

// The dashboard writes a memory figure exactly as ps and inspect do
// (proc.FormatMemory): its format.js, run by node, agrees with the Go
// formatter on the edges of every unit and rounding step, exact halves
// included, and on thousands of other values.
func TestDashboardFormatsMemoryAsTheCLI(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed to run the dashboard's format.js (make test installs what the tests need): %v", err)
	}
	src, err := fs.ReadFile(assets, "assets/format.js")
	if err != nil {
		t.Fatal(err)
	}
	var values []uint64
	for i := range 5 {
		d := uint64(1) << (10 * i)
		for _, m := range []uint64{1, 2, 99, 100, 1023, 1024} {
			for _, off := range []int64{-1, 0, 1} {
				v := int64(m*d) + off
				if v >= 0 {
					values = append(values, uint64(v))
				}
			}
			// Exact halves of a tenth and of a unit, and either side.
			for _, x := range []uint64{m*d + d/20, m*d + d/2} {
				values = append(values, x-1, x, x+1)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		values = append(values, r.Uint64N(1<<(10+r.UintN(36))))
	}
	var in strings.Builder
	for _, v := range values {
		in.WriteString(strconv.FormatUint(v, 10) + "\n")
	}
	script := filepath.Join(t.TempDir(), "run.js")
	prog := string(src) + `
const lines = require("fs").readFileSync(0, "utf8").trim().split("\n");
process.stdout.write(lines.map((l) => formatBytes(Number(l))).join("\n") + "\n");
`
	if err := os.WriteFile(script, []byte(prog), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script)
	cmd.Stdin = strings.NewReader(in.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v: %s", err, stderr.String())
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(got) != len(values) {
		t.Fatalf("node wrote %d lines for %d values", len(got), len(values))
	}
	bad := 0
	for i, v := range values {
		if want := proc.FormatMemory(v); got[i] != want {
			if bad++; bad <= 10 {
				t.Errorf("%d bytes: the dashboard writes %q, ps and inspect %q", v, got[i], want)
			}
		}
	}
	for _, c := range []struct {
		n    uint64
		want string
	}{{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1075, "1.0 KiB"}, {1076, "1.1 KiB"}, {99*1024 + 970, "99.9 KiB"},
		{99*1024 + 1000, "100 KiB"}, {1<<20 - 1, "1.0 MiB"}, {1023*1024 + 511, "1023 KiB"}, {1023*1024 + 512, "1.0 MiB"}, {150 << 20, "150 MiB"}, {41<<20 + 1<<18, "41.3 MiB"}, {3 << 40, "3.0 TiB"}, {5000 << 40, "5000 TiB"}} {
		if got := proc.FormatMemory(c.n); got != c.want {
			t.Errorf("FormatMemory(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

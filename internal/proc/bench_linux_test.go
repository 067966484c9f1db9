package proc

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

const initLine = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + initParams + "}\n"

// BenchmarkSpawnFirstResponse measures spawn → first response (initialize)
// from the fixture. "direct" is the baseline in the same run: a bare
// exec.Cmd in its own process group, no containment, as any gateway does.
// Compare the containment modes against it.
func BenchmarkSpawnFirstResponse(b *testing.B) {
	bin := testserver.Build(b)
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command(bin)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			in, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			io.WriteString(in, initLine)
			if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			in.Close()
			cmd.Wait()
			b.StartTimer()
		}
	})
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			rt := openRuntime(b, m.opts)
			for b.Loop() {
				p, err := rt.Spawn(context.Background(), Spec{Command: bin})
				if err != nil {
					b.Fatal(err)
				}
				io.WriteString(p.Stdin(), initLine)
				if _, err := bufio.NewReader(p.Stdout()).ReadString('\n'); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				p.Stop(context.Background())
				b.StartTimer()
			}
		})
	}
}

// BenchmarkStop measures Stop alone. "well-behaved" exits when its stdin
// closes (target ≤ 50 ms); "term-ignorer" ignores stdin EOF and SIGTERM,
// so its floor is StdinWait + TermWait = 100 ms; the "overhead-ms" metric
// is what Stop adds to the configured waits.
func BenchmarkStop(b *testing.B) {
	bin := testserver.Build(b)
	cases := []struct {
		name string
		env  []string
	}{
		{"well-behaved", nil},
		{"term-ignorer", []string{"FIXTURE_IGNORE_EOF=1", "FIXTURE_IGNORE_TERM=1"}},
	}
	const stdinWait, termWait = 50 * time.Millisecond, 50 * time.Millisecond
	for _, m := range modes {
		for _, c := range cases {
			b.Run(m.name+"/"+c.name, func(b *testing.B) {
				rt := openRuntime(b, m.opts)
				var total time.Duration
				for b.Loop() {
					b.StopTimer()
					p, err := rt.Spawn(context.Background(), Spec{
						Command:   bin,
						Env:       append(os.Environ(), c.env...),
						StdinWait: stdinWait,
						TermWait:  termWait,
					})
					if err != nil {
						b.Fatal(err)
					}
					io.WriteString(p.Stdin(), initLine)
					if line, err := bufio.NewReader(p.Stdout()).ReadString('\n'); err != nil || !strings.Contains(line, "result") {
						b.Fatal(line, err)
					}
					b.StartTimer()
					start := time.Now()
					if err := p.Stop(context.Background()); err != nil {
						b.Fatal(err)
					}
					total += time.Since(start)
				}
				if strings.Contains(c.name, "ignorer") {
					avg := total / time.Duration(b.N)
					b.ReportMetric(float64(avg-stdinWait-termWait)/1e6, "overhead-ms")
				}
			})
		}
	}
}

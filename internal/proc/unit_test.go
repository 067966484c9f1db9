package proc

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

func TestRingBoundsLinesAndBytes(t *testing.T) {
	r := NewRing(3, 10)
	for i := range 5 {
		r.Add(fmt.Sprintf("l%d", i))
	}
	if got := strings.Join(r.Lines(), ","); got != "l2,l3,l4" {
		t.Fatalf("lines = %q, want l2,l3,l4", got)
	}
	if r.Dropped() != 2 {
		t.Fatalf("dropped = %d, want 2", r.Dropped())
	}
	r.Add("abcdefgh") // 8 bytes: room is made by dropping the oldest lines
	if got := strings.Join(r.Lines(), ","); got != "l4,abcdefgh" {
		t.Fatalf("after big line: %q", got)
	}
	r.Add(strings.Repeat("x", 50))
	if got := r.Lines(); len(got) != 1 || len(got[0]) != 10 {
		t.Fatalf("oversized line not truncated to maxBytes: %q", got)
	}
	if got := r.Tail(1); got != strings.Repeat("x", 10) {
		t.Fatalf("tail = %q", got)
	}
}

func TestRingDefaults(t *testing.T) {
	r := NewRing(0, 0)
	for i := range DefaultRingLines + 7 {
		r.Add(fmt.Sprint(i))
	}
	if n := len(r.Lines()); n != DefaultRingLines {
		t.Fatalf("held %d lines, want %d", n, DefaultRingLines)
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		code  int
		sig   syscall.Signal
		stage string
		want  ExitKind
	}{
		{0, 0, "", ExitClean},
		{3, 0, "", ExitCrashed},
		{-1, syscall.SIGSEGV, "", ExitCrashed},
		{-1, syscall.SIGKILL, "", ExitCrashed}, // killed by someone else (OOM)
		{0, 0, "stdin", ExitStopped},
		{-1, syscall.SIGTERM, "term", ExitStopped},
		{-1, syscall.SIGKILL, "kill", ExitStopped},
		{1, 0, "term", ExitStopped},
	}
	for _, c := range cases {
		got := classify(c.code, c.sig, c.stage)
		if got.Kind != c.want {
			t.Errorf("classify(%d,%v,%q) = %v, want %v", c.code, c.sig, c.stage, got.Kind, c.want)
		}
		if c.sig != 0 && got.Code != -1 {
			t.Errorf("signal death must have Code -1, got %d", got.Code)
		}
		if got.Crashed() != (c.want == ExitCrashed) {
			t.Errorf("Crashed() = %v for %v", got.Crashed(), got)
		}
	}
	if s := classify(-1, syscall.SIGKILL, "kill").String(); s != "stopped (signal SIGKILL, after kill)" {
		t.Errorf("String() = %q", s)
	}
}

// A crash of a tree whose cgroup counted an OOM kill is oom, whatever
// ended the leader; the counters never turn a stop or a clean exit into
// one, and a SIGKILL without a counted OOM kill stays a plain crash.
func TestClassifyLimited(t *testing.T) {
	cases := []struct {
		code  int
		sig   syscall.Signal
		stage string
		ev    limitEvents
		want  ExitKind
	}{
		{-1, syscall.SIGKILL, "", limitEvents{oomKills: 1}, ExitOOM},
		{1, 0, "", limitEvents{oomKills: 2}, ExitOOM}, // the leader failed after its child was killed
		{-1, syscall.SIGKILL, "", limitEvents{}, ExitCrashed},
		{-1, syscall.SIGKILL, "", limitEvents{pidsMax: 9}, ExitCrashed},
		{-1, syscall.SIGKILL, "kill", limitEvents{oomKills: 1}, ExitStopped}, // mcpvisor's SIGKILL
		{-1, syscall.SIGKILL, "stdin", limitEvents{oomKills: 1}, ExitOOM},    // not mcpvisor's
		{-1, syscall.SIGKILL, "term", limitEvents{oomKills: 1}, ExitOOM},     // not mcpvisor's either
		{-1, syscall.SIGTERM, "term", limitEvents{oomKills: 1}, ExitStopped}, // a child's OOM kill, the stop's SIGTERM
		{0, 0, "stdin", limitEvents{oomKills: 1, pidsMax: 1}, ExitStopped},
		{0, 0, "", limitEvents{oomKills: 1}, ExitClean},
	}
	for _, c := range cases {
		got := classifyLimited(c.code, c.sig, c.stage, c.ev)
		if got.Kind != c.want || got.OOMKills != c.ev.oomKills || got.PIDsLimitHits != c.ev.pidsMax {
			t.Errorf("classifyLimited(%d,%v,%q,%+v) = %+v, want %v", c.code, c.sig, c.stage, c.ev, got, c.want)
		}
		if got.Crashed() != (c.want == ExitOOM || c.want == ExitCrashed) {
			t.Errorf("Crashed() = %v for %v", got.Crashed(), got)
		}
	}
	s := classifyLimited(-1, syscall.SIGKILL, "", limitEvents{oomKills: 1, pidsMax: 3}).String()
	if s != "oom (signal SIGKILL, 1 OOM kill(s), 3 fork(s) refused by the pids limit)" {
		t.Errorf("String() = %q", s)
	}
}

func TestPostExitWaitExit(t *testing.T) {
	w := PostExit{ExitHangWait: 2 * time.Second}
	t.Run("already exited costs no time", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ch := make(chan struct{})
			close(ch)
			start := time.Now()
			if v := w.WaitExit(t.Context(), ch); v != VerdictExited {
				t.Fatalf("verdict %v", v)
			}
			if d := time.Since(start); d != 0 {
				t.Fatalf("took %v", d)
			}
		})
	})
	t.Run("exit inside the window", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ch := make(chan struct{})
			time.AfterFunc(1999*time.Millisecond, func() { close(ch) })
			if v := w.WaitExit(t.Context(), ch); v != VerdictExited {
				t.Fatalf("verdict %v", v)
			}
		})
	})
	t.Run("hang fires at the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			v := w.WaitExit(t.Context(), make(chan struct{}))
			if v != VerdictExitHang || !v.Fired() {
				t.Fatalf("verdict %v", v)
			}
			if d := time.Since(start); d != 2*time.Second {
				t.Fatalf("fired after %v, want 2s", d)
			}
		})
	})
	t.Run("ctx cancels", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			if v := w.WaitExit(ctx, make(chan struct{})); v != VerdictCancelled {
				t.Fatalf("verdict %v", v)
			}
			if d := time.Since(start); d != 300*time.Millisecond {
				t.Fatalf("took %v", d)
			}
		})
	})
}

func TestPostExitWaitQuiesce(t *testing.T) {
	w := PostExit{QuiesceWait: time.Second, Poll: 100 * time.Millisecond}
	t.Run("quiet tree returns at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			if v := w.WaitQuiesce(t.Context(), func() int { return 0 }); v != VerdictQuiesced {
				t.Fatalf("verdict %v", v)
			}
			if time.Since(start) != 0 {
				t.Fatal("waited for an empty tree")
			}
		})
	})
	t.Run("descendants leave in time", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			alive := func() int {
				if time.Since(start) >= 450*time.Millisecond {
					return 0
				}
				return 2
			}
			if v := w.WaitQuiesce(t.Context(), alive); v != VerdictQuiesced {
				t.Fatalf("verdict %v", v)
			}
			if d := time.Since(start); d != 500*time.Millisecond {
				t.Fatalf("noticed after %v, want the next poll at 500ms", d)
			}
		})
	})
	t.Run("descendants hang", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			calls := 0
			v := w.WaitQuiesce(t.Context(), func() int { calls++; return 1 })
			if v != VerdictDescendantHang || !v.Fired() {
				t.Fatalf("verdict %v", v)
			}
			if d := time.Since(start); d != time.Second {
				t.Fatalf("fired after %v", d)
			}
			if calls < 10 {
				t.Fatalf("polled %d times, want about 11", calls)
			}
		})
	})
	t.Run("last look at the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			w := PostExit{QuiesceWait: time.Second, Poll: 10 * time.Second}
			alive := func() int {
				if time.Since(start) >= time.Second {
					return 0
				}
				return 1
			}
			if v := w.WaitQuiesce(t.Context(), alive); v != VerdictQuiesced {
				t.Fatalf("verdict %v", v)
			}
		})
	})
	t.Run("ctx cancels", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(250*time.Millisecond, cancel)
			if v := w.WaitQuiesce(ctx, func() int { return 1 }); v != VerdictCancelled {
				t.Fatalf("verdict %v", v)
			}
		})
	})
}

func TestSpecDefaults(t *testing.T) {
	var s Spec
	if s.stdinWait() != 2*time.Second || s.termWait() != 10*time.Second {
		t.Fatalf("defaults %v %v", s.stdinWait(), s.termWait())
	}
	s = Spec{StdinWait: -1, TermWait: 5 * time.Millisecond}
	if s.stdinWait() != 0 || s.termWait() != 5*time.Millisecond {
		t.Fatalf("overrides %v %v", s.stdinWait(), s.termWait())
	}
}

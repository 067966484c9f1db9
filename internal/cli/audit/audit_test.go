package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	auditlog "github.com/mcpvisor/mcpvisor/internal/audit"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
)

func streams() (cmdutil.IOStreams, *bytes.Buffer, *bytes.Buffer) {
	out, errOut := new(bytes.Buffer), new(bytes.Buffer)
	return cmdutil.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: errOut}, out, errOut
}

// The flags reach the options; a negative --limit is a usage error.
func TestFlags(t *testing.T) {
	io, _, _ := streams()
	var got *Options
	cmd := NewCmdAudit(io, func(_ context.Context, o *Options) error { got = o; return nil })
	cmd.SetArgs([]string{"-f", "--limit", "5", "--server", "gh", "--identity", "alice", "--outcome", "denied", "--json", "--addr", "h:2"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got == nil || !got.Follow || got.Limit != 5 || got.Server != "gh" || got.Identity != "alice" || got.Outcome != "denied" || !got.JSON || got.API.Addr != "h:2" {
		t.Fatalf("options %+v", got)
	}
	got = nil
	cmd = NewCmdAudit(io, func(_ context.Context, o *Options) error { got = o; return nil })
	cmd.SetArgs([]string{})
	if err := cmd.Execute(); err != nil || got.Limit != -1 || got.Follow {
		t.Fatalf("defaults %+v %v", got, err)
	}
	cmd = NewCmdAudit(io, func(context.Context, *Options) error { t.Error("ran"); return nil })
	cmd.SetOut(new(bytes.Buffer))
	cmd.SetErr(new(bytes.Buffer))
	cmd.SetArgs([]string{"--limit", "-2"})
	var usage shutdown.UsageError
	if err := cmd.Execute(); !errors.As(err, &usage) {
		t.Fatalf("--limit -2: %v", err)
	}
}

// A real Log behind a fake serve: the records, human and JSON, with the
// filters passed on.
func TestPrint(t *testing.T) {
	l, err := auditlog.Open(auditlog.Options{File: t.TempDir() + "/a.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	at := time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC)
	l.Add(auditlog.Record{Time: at, Identity: "alice", Client: "cli", Server: "gh", Target: "search", Outcome: "ok", Duration: 1500 * time.Microsecond})
	l.Add(auditlog.Record{Time: at, Identity: "bob", Server: "gh", Target: "delete", Outcome: "denied", Code: -32001, Reason: "rule no-delete: bob is not in admins"})
	for l.Stats().Written < 2 {
		time.Sleep(time.Millisecond)
	}
	var queries []string
	var mu sync.Mutex
	mux := http.NewServeMux()
	mux.Handle("/api/audit", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		l.Handler().ServeHTTP(w, r)
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	io, out, _ := streams()
	o := &Options{IO: io, API: adminclient.Client{Addr: srv.URL}, Limit: -1}
	if err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "alice (cli)") || !strings.Contains(lines[0], "gh/search") || !strings.Contains(lines[0], "1.5ms") ||
		!strings.Contains(lines[1], "denied -32001") || !strings.HasSuffix(lines[1], "rule no-delete: bob is not in admins") {
		t.Fatalf("human output:\n%s", out.String())
	}
	io, out, _ = streams()
	o = &Options{IO: io, API: adminclient.Client{Addr: srv.URL}, Limit: 5, Identity: "bob", JSON: true}
	if err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), `{"seq":2,"time":"2026-12-05T06:00:00.000Z","identity":"bob"`) || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("--json --identity bob: %q", out.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if queries[0] != "" || queries[1] != "identity=bob&limit=5" {
		t.Fatalf("queries %q", queries)
	}
}

// -f prints the new records; after a lag it resumes after the last one
// printed, printing none twice; the stream's end ends it.
func TestFollowResumes(t *testing.T) {
	var mu sync.Mutex
	var queries []string
	rec := func(seq int) string {
		return fmt.Sprintf(`{"seq":%d,"time":"2026-12-05T06:00:00.000Z","identity":"u","server":"s","target":"t%d","outcome":"ok","duration_ms":1}`+"\n", seq, seq)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n := len(queries)
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-ndjson")
		switch n {
		case 0:
			fmt.Fprint(w, rec(1), "\n", rec(2), `{"lagged":true,"seq":2}`+"\n")
		default:
			fmt.Fprint(w, rec(3), "\n")
		}
	}))
	defer srv.Close()
	io, out, errOut := streams()
	o := &Options{IO: io, API: adminclient.Client{Addr: srv.URL}, Limit: 0, Follow: true, JSON: true}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Run(ctx, o); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), rec(1)+rec(2)+rec(3); got != want || errOut.Len() != 0 {
		t.Fatalf("printed\n%s(stderr %q)\nwant\n%s", got, errOut.String(), want)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(queries, " ") != "follow=1&limit=0 after=2&follow=1&limit=1000" {
		t.Fatalf("queries %q", queries)
	}
}

// A stream that goes quiet is opened again; an interrupt ends -f
// cleanly.
func TestFollowQuietAndInterrupt(t *testing.T) {
	old := quiet
	quiet = 200 * time.Millisecond
	t.Cleanup(func() { quiet = old })
	var mu sync.Mutex
	connects := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		connects++
		mu.Unlock()
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // never a word
	}))
	defer srv.Close()
	io, _, _ := streams()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(700*time.Millisecond, cancel) // the interrupt
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, &Options{IO: io, API: adminclient.Client{Addr: srv.URL}, Limit: -1, Follow: true})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("interrupted: %v; want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("-f did not end on interrupt")
	}
	mu.Lock()
	defer mu.Unlock()
	if connects < 2 {
		t.Fatalf("%d connects; want the quiet stream opened again", connects)
	}
}

// A serve without audit, and no serve at all, are said in words.
func TestErrors(t *testing.T) {
	var nolog *auditlog.Log
	srv := httptest.NewServer(nolog.Handler())
	defer srv.Close()
	for _, follow := range []bool{false, true} {
		io, _, _ := streams()
		err := Run(context.Background(), &Options{IO: io, API: adminclient.Client{Addr: srv.URL}, Limit: -1, Follow: follow})
		if err == nil || !strings.Contains(err.Error(), "has no audit log (audit is not configured)") {
			t.Errorf("follow %v, no audit: %v", follow, err)
		}
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	addr := dead.URL
	dead.Close()
	io, _, _ := streams()
	err := Run(context.Background(), &Options{IO: io, API: adminclient.Client{Addr: addr}, Limit: -1})
	if err == nil || !strings.Contains(err.Error(), "is mcpvisor serve running") {
		t.Errorf("no serve: %v", err)
	}
}

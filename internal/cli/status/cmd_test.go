package status

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
)

// The flags and the argument of ps and inspect reach their options
// through runF; a command line they refuse never runs them.
func TestFlagsReachTheOptions(t *testing.T) {
	var out bytes.Buffer
	io := cmdutil.IOStreams{Out: &out, ErrOut: &out}
	var ps *PsOptions
	cmd := NewCmdPs(io, func(_ context.Context, o *PsOptions) error { ps = o; return nil })
	cmd.SetArgs([]string{"--addr", "10.0.0.1:9", "--token-file", "/t", "--json"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if ps == nil || ps.API != (adminclient.Client{Addr: "10.0.0.1:9", TokenFile: "/t"}) || !ps.JSON || ps.Now == nil {
		t.Errorf("ps options: %+v", ps)
	}
	var in *InspectOptions
	cmd = NewCmdInspect(io, func(_ context.Context, o *InspectOptions) error { in = o; return nil })
	cmd.SetArgs([]string{"github"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if in == nil || in.Server != "github" || in.API.Addr != "127.0.0.1:7331" || in.JSON {
		t.Errorf("inspect options: %+v", in)
	}
	for _, args := range [][]string{{}, {"a", "b"}} {
		ran := false
		cmd := NewCmdInspect(io, func(context.Context, *InspectOptions) error { ran = true; return nil })
		cmd.SetArgs(args)
		cmd.SetOut(new(bytes.Buffer))
		cmd.SetErr(new(bytes.Buffer))
		if err := cmd.Execute(); err == nil || ran {
			t.Errorf("inspect %q: ran %v, error %v", args, ran, err)
		}
	}
}

// ps and inspect against a fake admin API: the table from the servers'
// JSON, the JSON as it came with --json, and the API's 404 in its words.
func TestAgainstAFakeAPI(t *testing.T) {
	const servers = `{"servers":[{"name":"github","state":"running","pid":4242,"restarts":1,"spawns":2}],` +
		`"totals":{"total":1,"active":1,"dormant":0,"byState":{"running":1}}}`
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/servers":
			_, _ = w.Write([]byte(servers))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"no server named \"nope\" (servers: github)"}`))
		}
	}))
	defer api.Close()
	now := func() time.Time { return time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC) }
	var out bytes.Buffer
	o := &PsOptions{IO: cmdutil.IOStreams{Out: &out}, API: adminclient.Client{Addr: api.URL}, Now: now}
	if err := RunPs(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if table := out.String(); !strings.Contains(table, "NAME") || !strings.Contains(table, "github") || !strings.Contains(table, "running") ||
		!strings.Contains(table, "4242") || !strings.Contains(table, "1 servers: 1 active, 0 dormant (running 1)") {
		t.Errorf("ps:\n%s", table)
	}
	out.Reset()
	o.JSON = true
	if err := RunPs(context.Background(), o); err != nil || out.String() != servers {
		t.Errorf("ps --json: %q %v", out.String(), err)
	}
	// A command built with no streams writes where its cobra command
	// does (the root's SetOut, in mcpvisor and its tests).
	var viaCobra bytes.Buffer
	cmd := NewCmdPs(cmdutil.IOStreams{}, nil)
	cmd.SetOut(&viaCobra)
	cmd.SetArgs([]string{"--addr", strings.TrimPrefix(api.URL, "http://")})
	if err := cmd.Execute(); err != nil || !strings.Contains(viaCobra.String(), "github") {
		t.Errorf("ps with the command's streams: %q %v", viaCobra.String(), err)
	}
	err := RunInspect(context.Background(), &InspectOptions{IO: cmdutil.IOStreams{Out: &out}, Server: "nope", API: adminclient.Client{Addr: api.URL}, Now: now})
	if err == nil || err.Error() != `no server named "nope" (servers: github)` {
		t.Errorf("inspect nope: %v", err)
	}
}

// wait asks again until the servers are ready, and names what is not
// ready when its timeout passes first.
func TestRunWaitAgainstAFakeAPI(t *testing.T) {
	var mu sync.Mutex
	asked := 0
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked++
		n := asked
		mu.Unlock()
		ready := n >= 3 && r.URL.Query().Get("never") == ""
		_, _ = fmt.Fprintf(w, `{"servers":[{"name":"x","state":"starting","learned":true,"ready":%v,"lastError":"slow"}],"totals":{}}`, ready)
	}))
	defer api.Close()
	o := &WaitOptions{API: adminclient.Client{Addr: api.URL}, Timeout: 20 * time.Second}
	if err := RunWait(context.Background(), o); err != nil {
		t.Fatalf("wait for a server ready at the third ask: %v", err)
	}
	mu.Lock()
	if asked != 3 {
		t.Errorf("asked %d times, want 3", asked)
	}
	asked = -1000 // never ready again
	mu.Unlock()
	o.Timeout = 300 * time.Millisecond
	err := RunWait(context.Background(), o)
	if err == nil || !strings.HasPrefix(err.Error(), "not ready after 300ms: waiting for x (starting, last error: slow)") {
		t.Errorf("wait whose timeout passes: %v", err)
	}
	o.Servers = []string{"nope"}
	if err := RunWait(context.Background(), o); err == nil || !strings.Contains(err.Error(), `no server named "nope"; configured: x`) {
		t.Errorf("wait for a server that does not exist: %v", err)
	}
}

// A command built without streams takes its cobra command's at every
// run: a second run after SetOut writes to the new writer, not the first.
func TestEachRunTakesTheCommandsStreams(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"servers":[{"name":"github","state":"running"}],"totals":{}}`))
	}))
	defer api.Close()
	cmd := NewCmdPs(cmdutil.IOStreams{}, nil)
	cmd.SetArgs([]string{"--addr", strings.TrimPrefix(api.URL, "http://")})
	var first, second bytes.Buffer
	cmd.SetOut(&first)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	first.Reset()
	cmd.SetOut(&second)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(second.String(), "github") || first.Len() != 0 {
		t.Errorf("the second run wrote to the first run's writer: second %q, first %q", second.String(), first.String())
	}
}

// A replica's ps shows the whole deployment after its servers: who runs
// what, who is unready or unreachable.
func TestPsShowsTheDeployment(t *testing.T) {
	const servers = `{"servers":[],"totals":{"total":0,"active":0,"dormant":0,"byState":{}}}`
	const replicas = `{"self":1,"replicas":[
	  {"ordinal":0,"address":"mcpvisor-0.peers:7332","reachable":true,"ready":"ok","configVersion":"abc","servers":{"memory":1,"fx":2},"forwarded":5,"received":7,"gone":0},
	  {"ordinal":1,"address":"mcpvisor-1.peers:7332","reachable":true,"ready":"draining","configVersion":"abc"},
	  {"ordinal":2,"address":"mcpvisor-2.peers:7332","reachable":false,"error":"dial tcp: connection refused"}]}`
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/servers":
			_, _ = w.Write([]byte(servers))
		case "/api/replicas":
			_, _ = w.Write([]byte(replicas))
		default:
			http.NotFound(w, r)
		}
	}))
	defer api.Close()
	var out bytes.Buffer
	o := &PsOptions{IO: cmdutil.IOStreams{Out: &out}, API: adminclient.Client{Addr: api.URL}, Now: time.Now}
	if err := RunPs(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"replicas (this is 1):", "fx×2,memory×1", "draining", "unreachable: dial tcp: connection refused", "mcpvisor-2.peers:7332"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("ps lacks %q:\n%s", want, out.String())
		}
	}
}

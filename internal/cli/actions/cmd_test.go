package actions

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/admin/adminclient"
	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
)

// The flags and argument of each action reach its options through runF.
func TestFlagsReachTheOptions(t *testing.T) {
	io := cmdutil.IOStreams{In: strings.NewReader(""), Out: new(bytes.Buffer), ErrOut: new(bytes.Buffer)}
	for _, c := range []struct {
		new  func(cmdutil.IOStreams, func(context.Context, *Options) error) interface{ Execute() error }
		args []string
		want Options
	}{
		{func(s cmdutil.IOStreams, f func(context.Context, *Options) error) interface{ Execute() error } {
			cmd := NewCmdRestart(s, f)
			cmd.SetArgs([]string{"github", "--timeout", "5s", "--json", "--addr", "h:1"})
			return cmd
		}, nil, Options{IO: io, Action: "restart", Server: "github", Timeout: 5 * time.Second, JSON: true, API: adminclient.Client{Addr: "h:1"}}},
		{func(s cmdutil.IOStreams, f func(context.Context, *Options) error) interface{ Execute() error } {
			cmd := NewCmdSleep(s, f)
			cmd.SetArgs([]string{"x"})
			return cmd
		}, nil, Options{IO: io, Action: "sleep", Server: "x", Timeout: admin.DefaultActionTimeout, API: adminclient.Client{Addr: "127.0.0.1:7331"}}},
		{func(s cmdutil.IOStreams, f func(context.Context, *Options) error) interface{ Execute() error } {
			cmd := NewCmdReload(s, f)
			cmd.SetArgs([]string{"--all", "--timeout", "1m"})
			return cmd
		}, nil, Options{IO: io, Action: "reload", All: true, Timeout: time.Minute, API: adminclient.Client{Addr: "127.0.0.1:7331"}}},
	} {
		var got *Options
		if err := c.new(io, func(_ context.Context, o *Options) error { got = o; return nil }).Execute(); err != nil {
			t.Fatal(err)
		}
		if got == nil || *got != c.want {
			t.Errorf("options %+v, want %+v", got, c.want)
		}
	}
	var r *RefreshOptions
	cmd := NewCmdRefresh(io, func(_ context.Context, o *RefreshOptions) error { r = o; return nil })
	cmd.SetArgs([]string{"npxserver", "--json"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if r == nil || len(r.Servers) != 1 || r.Servers[0] != "npxserver" || !r.JSON {
		t.Errorf("refresh options: %+v", r)
	}
}

// An action against a fake admin API: done (said in words), refused (an
// error that says why), answered by something that is not the API (its
// status and body), and a timeout that is no bound (a usage error, nothing
// sent).
func TestRunActionAgainstAFakeAPI(t *testing.T) {
	var asked []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		switch r.URL.Path {
		case "/api/servers/a/restart":
			_, _ = w.Write([]byte(`{"server":"a","action":"restart","ok":true,"tookMs":12.5,"status":{"name":"a","pid":77}}`))
		case "/api/servers/b/sleep":
			_, _ = w.Write([]byte(`{"server":"b","action":"sleep","ok":false,"error":"2 requests in flight","tookMs":0,"status":{}}`))
		default:
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("upstream gone"))
		}
	}))
	defer api.Close()
	var out bytes.Buffer
	o := func(action, server string) *Options {
		return &Options{IO: cmdutil.IOStreams{Out: &out}, Action: action, Server: server, API: adminclient.Client{Addr: api.URL}, Timeout: time.Second}
	}
	if err := RunAction(context.Background(), o("restart", "a")); err != nil || out.String() != "restarted a, pid 77, in 13ms\n" {
		t.Errorf("restart: %q %v", out.String(), err)
	}
	if asked[0] != "POST /api/servers/a/restart?timeout=1s" {
		t.Errorf("asked %q", asked[0])
	}
	out.Reset()
	if err := RunAction(context.Background(), o("sleep", "b")); err == nil || err.Error() != "sleep b: 2 requests in flight" || out.Len() != 0 {
		t.Errorf("a refused sleep: %q %v", out.String(), err)
	}
	var se *adminclient.StatusError
	if err := RunAction(context.Background(), o("stop", "c")); !errors.As(err, &se) || se.Code != http.StatusBadGateway || !strings.Contains(err.Error(), "upstream gone") {
		t.Errorf("an answer not of the API: %v", err)
	}
	n := len(asked)
	bad := o("start", "a")
	bad.Timeout = 0
	var usage shutdown.UsageError
	if err := RunAction(context.Background(), bad); !errors.As(err, &usage) || len(asked) != n {
		t.Errorf("--timeout 0: %v, %d requests sent", err, len(asked)-n)
	}
}

// A reload whose file is rejected is an error listing each problem where
// it is; refresh without a name refreshes every server run through a
// package launcher, and says which failed.
func TestRunReloadAndRefresh(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/reload":
			_, _ = w.Write([]byte(`{"trigger":"api","applied":false,"error":"the new configuration has errors","problems":[{"path":"mcpServers.a.command","message":"required"},{"line":3,"column":7,"message":"bad token"}]}`))
		case "/api/servers":
			_, _ = w.Write([]byte(`{"servers":[{"name":"n1","launcher":{"name":"npx","flattened":true,"runs":"node …"}},{"name":"plain"},{"name":"n2","launcher":{"name":"npx","reason":"not installed"}}],"totals":{}}`))
		case "/api/servers/n1/refresh":
			_, _ = w.Write([]byte(`{"server":"n1","action":"refresh","ok":true,"tookMs":3,"status":{"name":"n1","launcher":{"name":"npx","flattened":true,"runs":"node …/s@2"}}}`))
		default:
			_, _ = w.Write([]byte(`{"server":"n2","action":"refresh","ok":false,"error":"npm failed","tookMs":3,"status":{}}`))
		}
	}))
	defer api.Close()
	var out, errOut bytes.Buffer
	io := cmdutil.IOStreams{Out: &out, ErrOut: &errOut}
	err := RunReload(context.Background(), &Options{IO: io, Action: "reload", API: adminclient.Client{Addr: api.URL}, Timeout: time.Second})
	if err == nil || err.Error() != "the new configuration has errors\n  mcpServers.a.command: required\n  line 3, column 7: bad token" {
		t.Errorf("a rejected reload: %v", err)
	}
	err = RunRefresh(context.Background(), &RefreshOptions{IO: io, API: adminclient.Client{Addr: api.URL}, Timeout: time.Second})
	if err == nil || err.Error() != "refresh failed for n2" || !strings.Contains(out.String(), "n1: node …/s@2 (resolved in 3ms)") || !strings.Contains(errOut.String(), "n2: npm failed") {
		t.Errorf("refresh of all: %v\nout %q\nerr %q", err, out.String(), errOut.String())
	}
}

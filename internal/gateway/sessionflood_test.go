package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// floodSessions is how many initializes a flood sends: five times the
// default maxSessions, as the lockout was measured.
const floodSessions = 5 * DefaultMaxSessions

// A flood of sessions never locks clients out, with the default bound
// (DefaultMaxSessions, shared by /mcp and /servers/x/mcp as mcpvisor
// serve shares it): 5,000 initializes on /mcp that are never deleted —
// alone, and each holding a GET stream — are all admitted, the least
// recently active sessions evicted to make room; after each flood a new
// go-sdk client works, a new GET stream opens, and a client that was
// active on /servers/x/mcp before the flood gets 404 (the go-sdk's
// ErrSessionMissing), initializes again and works. A client whose call
// to a slow tool is in flight all through the flood keeps its session.
// The table never holds more than the bound, every evicted session's GET
// stream ends, and the evictions are counted.
func TestSessionFloodNeverLocksOut(t *testing.T) {
	for _, withStream := range []bool{false, true} {
		name := "initializes only"
		if withStream {
			name = "each holding a GET stream"
		}
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, `{"x":{"command":"$FIXTURE"}}`)
			limit := NewSessionLimit(0)
			limit.SetLogger(nil)
			t.Cleanup(limit.Flush) // its burst's timer ends with the test
			opts := HTTPOptions{SessionLimit: limit}
			agg := NewStreamableHandler(w.gw.Aggregate(), opts)
			one := NewStreamableHandler(w.gw.Single("x"), opts)
			mux := http.NewServeMux()
			mux.Handle("/mcp", agg)
			mux.Handle("/servers/x/mcp", one)
			srv := httptest.NewServer(mux)
			t.Cleanup(func() {
				agg.Close()
				one.Close()
				srv.Close()
			})
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()

			before := sdkConnect(t, ctx, srv.URL+"/servers/x/mcp")
			defer before.Close()
			sdkEcho(t, ctx, before, "echo", "before")
			busy := sdkConnect(t, ctx, srv.URL+"/mcp")
			defer busy.Close()
			slow, stopSlow := context.WithCancel(ctx)
			defer stopSlow()
			slept := make(chan error, 1)
			go func() {
				_, err := busy.CallTool(slow, &mcp.CallToolParams{Name: "x__sleep", Arguments: map[string]any{"ms": 120_000}})
				slept <- err
			}()
			waitFor(t, "the slow call to be in flight", func() bool { return w.fleet.Get("x").Status().InFlight == 1 })

			f := floodHTTP(t, ctx, srv.URL+"/mcp", floodSessions, withStream)
			if f.refused.Load() != 0 {
				t.Fatalf("%d of %d initializes refused during the flood (first: %s), want none", f.refused.Load(), floodSessions, f.firstRefusal())
			}
			if n := limit.Open(); n > DefaultMaxSessions {
				t.Fatalf("%d places held after the flood, over the bound of %d", n, DefaultMaxSessions)
			}
			if got, n := agg.Sessions()+one.Sessions(), limit.Open(); got != n {
				t.Errorf("the handlers hold %d sessions, the limit counts %d", got, n)
			}
			// Every session beyond the bound made room: the one before
			// the flood, and all of the flood's but the last 999 (the
			// busy one keeps its place).
			if got, want := limit.Evictions(EvictLimit), uint64(floodSessions+2-DefaultMaxSessions); got != want {
				t.Errorf("%d evictions counted, want %d", got, want)
			}
			if withStream {
				waitFor(t, "every evicted session's GET stream to end", func() bool {
					return f.streamsEnded.Load() == int64(floodSessions+1-DefaultMaxSessions)
				})
			}
			if n := requestsOf(agg, busy.ID()); n != 1 {
				t.Fatalf("the session with a call in flight: %d requests in flight (-1: gone), want its call", n)
			}
			stopSlow()
			<-slept
			sdkEcho(t, ctx, busy, "x__echo", "still here")

			fresh := sdkConnect(t, ctx, srv.URL+"/mcp")
			defer fresh.Close()
			sdkEcho(t, ctx, fresh, "x__echo", "new client")
			if status := openRawStream(t, ctx, srv.URL+"/mcp"); status != http.StatusOK {
				t.Errorf("a new GET stream after the flood: HTTP %d", status)
			}

			_, err := before.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
			if !sessionMissing(err) {
				t.Fatalf("the client active before the flood: %v, want its session gone (404, ErrSessionMissing)", err)
			}
			again := sdkConnect(t, ctx, srv.URL+"/servers/x/mcp")
			defer again.Close()
			sdkEcho(t, ctx, again, "echo", "again")
		})
	}
}

// sessionMissing reports whether err is the go-sdk client's word that
// its session is gone (a 404): ErrSessionMissing, which the client's
// standalone stream, when it meets the 404 first, reports in its words.
func sessionMissing(err error) bool {
	return err != nil && (errors.Is(err, mcp.ErrSessionMissing) || strings.Contains(err.Error(), mcp.ErrSessionMissing.Error()))
}

// requestsOf reports a session's requests in flight, -1 if it is gone.
func requestsOf(h *StreamableHandler, sid string) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if hs := h.sessions[sid]; hs != nil {
		return int(hs.place.state.Load() & placeReqMask)
	}
	return -1
}

// sdkConnect connects a go-sdk client at 2025-11-25 to url.
func sdkConnect(t *testing.T, ctx context.Context, url string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "flood-test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	return cs
}

// sdkEcho calls an echo tool named tool and checks its answer.
func sdkEcho(t *testing.T, ctx context.Context, cs *mcp.ClientSession, tool, text string) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": text}})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if got := textOf(t, res); got != text {
		t.Fatalf("%s answered %q, want %q", tool, got, text)
	}
}

// flood is what floodHTTP saw.
type flood struct {
	refused      atomic.Int64 // initializes (or GETs) not answered 200
	streamsEnded atomic.Int64 // GET streams the server ended
	mu           sync.Mutex
	first        string
}

func (f *flood) refuse(what string) {
	f.refused.Add(1)
	f.mu.Lock()
	if f.first == "" {
		f.first = what
	}
	f.mu.Unlock()
}

func (f *flood) firstRefusal() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.first
}

const floodInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"flood","version":"0"}}}`

// floodHTTP sends n initializes to url from 8 workers, each followed,
// withStream, by a GET stream held open until the server ends it. It returns once every initialize (and GET)
// was answered.
func floodHTTP(t *testing.T, ctx context.Context, url string, n int, withStream bool) *flood {
	t.Helper()
	f := &flood{}
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	post := func(body string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
		req.Header.Set("Accept", httpAccept)
		req.Header.Set("Content-Type", "application/json")
		return client.Do(req)
	}
	var streams sync.WaitGroup
	t.Cleanup(streams.Wait) // a stream still open ends with the handler
	next := atomic.Int64{}
	var workers sync.WaitGroup
	for range 8 {
		workers.Go(func() {
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				resp, err := post(floodInit)
				if err != nil {
					f.refuse(err.Error())
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				sid := resp.Header.Get("Mcp-Session-Id")
				if resp.StatusCode != http.StatusOK || sid == "" {
					f.refuse(fmt.Sprintf("initialize: HTTP %d %s", resp.StatusCode, b))
					continue
				}
				if !withStream {
					continue
				}
				req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
				req.Header.Set("Accept", "text/event-stream")
				req.Header.Set("Mcp-Session-Id", sid)
				req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
				resp, err = client.Do(req)
				if err != nil || resp.StatusCode != http.StatusOK {
					f.refuse(fmt.Sprintf("GET stream: %v %v", err, resp))
					if err == nil {
						resp.Body.Close()
					}
					continue
				}
				// The first bytes: the stream is open and counted.
				if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
					f.refuse("GET stream: " + err.Error())
				}
				streams.Go(func() {
					defer resp.Body.Close()
					if _, err := io.Copy(io.Discard, resp.Body); err == nil {
						f.streamsEnded.Add(1) // the server ended it
					}
				})
			}
		})
	}
	workers.Wait()
	return f
}

// openRawStream initializes a session on url and opens its GET stream,
// returning the GET's status once its first bytes arrived.
func openRawStream(t *testing.T, ctx context.Context, url string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(floodInit))
	req.Header.Set("Accept", httpAccept)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize for a GET stream: HTTP %d", resp.StatusCode)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, _ = http.NewRequestWithContext(sctx, "GET", url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != ": ok\n" {
			t.Errorf("the new GET stream's first line: %q %v", line, err)
		}
	}
	return resp.StatusCode
}

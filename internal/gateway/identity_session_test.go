package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// testUsers are the identities the header X-Test-User selects, as the
// guard would put a verified token's in the request's context.
var testUsers = map[string]*identity.Identity{
	"alice":       (&identity.Identity{Kind: identity.Token, Issuer: "https://as", Subject: "alice", ClientID: "c1"}).Finish(),
	"alice-other": (&identity.Identity{Kind: identity.Token, Issuer: "https://as", Subject: "alice", ClientID: "c2"}).Finish(),
	"bob":         (&identity.Identity{Kind: identity.Token, Issuer: "https://as", Subject: "bob", ClientID: "c1"}).Finish(),
}

func withTestUsers(srv *httptest.Server) {
	next := srv.Config.Handler
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := testUsers[r.Header.Get("X-Test-User")]; id != nil {
			r = r.WithContext(identity.NewContext(r.Context(), id))
		}
		next.ServeHTTP(w, r)
	})
}

// A legacy session is its initializer's: its id in another identity's
// request — another person, the same person by another client, or no
// identity at all — finds no session (404, as for one that never
// existed), and leaves it alone.
func TestSessionBelongsToItsIdentity(t *testing.T) {
	s := newHTTPTestServerWith(t, HTTPOptions{}, withTestUsers)
	alice := map[string]string{"X-Test-User": "alice"}
	resp := s.do("POST", "", httpInit, alice)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, sid)
	}
	ping := `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	for _, who := range []string{"bob", "alice-other", ""} {
		hdr := map[string]string{"X-Test-User": who}
		for _, method := range []string{"POST", "GET", "DELETE"} {
			body := ""
			if method == "POST" {
				body = ping
			}
			resp := s.do(method, sid, body, hdr) // a GET stream let in would not end: not read
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s by %q on alice's session: %d, want 404", method, who, resp.StatusCode)
			}
		}
	}
	if n := s.h.Sessions(); n != 1 {
		t.Fatalf("alice's session is gone after the others' requests: %d sessions", n)
	}
	if st := s.status("POST", sid, ping, alice); st != http.StatusOK {
		t.Errorf("alice's own ping: %d", st)
	}
	if st := s.status("DELETE", sid, "", alice); st != http.StatusNoContent {
		t.Errorf("alice's own DELETE: %d", st)
	}
}

// asUser serves h as if every request came with id's verified token.
func asUser(t *testing.T, h http.Handler, id *identity.Identity) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(identity.NewContext(r.Context(), id)))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A requestState is its identity's: another identity's retry with it —
// another person, or the same by another client — is refused as another
// request's, answers nothing to the server and leaves the held call to
// its owner, whose own retry completes it.
func TestMRTRStateIsItsIdentitys(t *testing.T) {
	w := newMRTRWorld(t)
	alice := &mrtrWorld{world: w.world, h: w.h, url: asUser(t, w.h, testUsers["alice"])}
	key, _, state := inputRequired(t, alice.call("1", "", `{"elicitation":{}}`))
	w.heldCalls(1)
	answer := `,"requestState":` + mustJSONString(state) + `,"inputResponses":{` + mustJSONString(key) + `:` + acceptUser + `}`
	for _, who := range []string{"bob", "alice-other"} {
		other := &mrtrWorld{world: w.world, h: w.h, url: asUser(t, w.h, testUsers[who])}
		if m := other.call("2", answer, `{"elicitation":{}}`); m.Error == nil || m.Error.Code != rpc.InvalidParams || !strings.Contains(m.Error.Message, "another request") {
			t.Errorf("%s's retry with alice's state: %s", who, m.Encode())
		}
	}
	if m := w.call("3", answer, `{"elicitation":{}}`); m.Error == nil || !strings.Contains(m.Error.Message, "another request") {
		t.Errorf("an anonymous retry with alice's state: %s", m.Encode())
	}
	w.heldCalls(1)
	m := alice.call("4", answer, `{"elicitation":{}}`)
	if m.Error != nil || !strings.Contains(string(m.Result), "ada") {
		t.Fatalf("alice's own retry: %s", m.Encode())
	}
	w.heldCalls(0)
}

// modernRequestAs is modernRequest from the identity id.
func modernRequestAs(t *testing.T, id *identity.Identity, ep Endpoint, method string, params map[string]any, caps string) *rpc.Message {
	t.Helper()
	b, _ := json.Marshal(params)
	p := strings.TrimSuffix(string(b), "}") + "," + modernMeta(caps) + "}"
	m := &rpc.Message{ID: json.RawMessage(`7`), Method: method, Params: json.RawMessage(p)}
	return ep.Stateless(identity.NewContext(t.Context(), id), m, mustModern(t, p), newRecorder())
}

// A 2026-07-28 request's task is its identity's: another identity's (or
// an anonymous) tasks/get or tasks/cancel with its id finds nothing, and
// the task runs on; its owner's request reaches it.
func TestModernTaskIsItsIdentitys(t *testing.T) {
	w := newWorld(t, fmt.Sprintf(`{"a":%s}`, tasksServer(t, "")))
	agg := w.gw.Aggregate()
	alice := testUsers["alice"]
	resp := modernRequestAs(t, alice, agg, "tools/call", map[string]any{"name": "a__slow_compute", "arguments": map[string]any{"seconds": 60}}, withTasks)
	var r struct{ TaskID string }
	if resp.Error != nil || json.Unmarshal(resp.Result, &r) != nil || r.TaskID == "" {
		t.Fatalf("alice's task: %s", resultOf(resp))
	}
	for _, who := range []string{"bob", "alice-other"} {
		for _, m := range []string{"tasks/get", "tasks/cancel"} {
			wantError(t, who+"'s "+m, modernRequestAs(t, testUsers[who], agg, m, map[string]any{"taskId": r.TaskID}, withTasks), rpc.InvalidParams, "not found")
		}
	}
	wantError(t, "an anonymous tasks/get", modernRequest(t, agg, "tasks/get", map[string]any{"taskId": r.TaskID}, withTasks), rpc.InvalidParams, "not found")
	resp = modernRequestAs(t, alice, agg, "tasks/get", map[string]any{"taskId": r.TaskID}, withTasks)
	if resp.Error != nil || !strings.Contains(string(resp.Result), `"working"`) {
		t.Errorf("alice's own tasks/get: %s", resultOf(resp))
	}
}

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/audit"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/policy"
	"github.com/mcpvisor/mcpvisor/internal/ratelimit"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

func mustPolicy(t *testing.T, rules ...policy.Rule) *policy.Policy {
	t.Helper()
	p, err := policy.Compile(rules)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func listedTools(t *testing.T, resp *rpc.Message) []string {
	t.Helper()
	var res struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if resp.Error != nil || json.Unmarshal(resp.Result, &res) != nil {
		t.Fatalf("tools/list: %s", resp.Encode())
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// The policy decides each call before its server is reached, by the
// name the server knows (escapes decoded) and the body's arguments, and
// lists show each identity only what some call of which could be
// allowed — on /mcp and on a server's own endpoint.
func TestPolicyDecidesCallsAndFiltersLists(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"},"b":{"command":"$FIXTURE"}}`)
	w.gw.SetPolicy(mustPolicy(t,
		policy.Rule{Name: "a for all", Effect: policy.Allow, When: `server == "a"`},
		policy.Rule{Name: "no crash", Effect: policy.Deny, When: `tool == "crash"`},
		policy.Rule{Name: "b for alice", Effect: policy.Allow, When: `identity.sub == "alice" && server == "b" && tool == "echo" && arguments.text.startsWith("ok")`},
	))
	ctx := context.Background()
	ep := w.gw.Aggregate()
	open := func(who string) *Session {
		s := ep.Open(newRecorder())
		t.Cleanup(func() { ep.Close(s) })
		if who != "" {
			s.SetIdentity((&identity.Identity{Kind: identity.Token, Issuer: "https://as", Subject: who, ClientID: "c"}).Finish())
		}
		return s
	}
	bob, alice := open("bob"), open("alice")
	call := func(s *Session, id int, name, args string) *rpc.Message {
		m := &rpc.Message{ID: json.RawMessage(`"` + strings.Repeat("x", id) + `"`), Method: "tools/call", Params: json.RawMessage(`{"name":"` + name + `","arguments":` + args + `}`)}
		return ep.Handle(ctx, s, m, newRecorder())
	}
	denied := func(resp *rpc.Message) bool {
		return resp.Error != nil && resp.Error.Code == rpc.NotPermitted && resp.Error.Message == "not permitted" && resp.Error.Data == nil
	}

	bobList := listedTools(t, ep.Handle(ctx, bob, request(1, "tools/list", map[string]any{}), newRecorder()))
	if !slices.Contains(bobList, "a__echo") || slices.Contains(bobList, "a__crash") || slices.ContainsFunc(bobList, func(n string) bool { return strings.HasPrefix(n, "b__") }) {
		t.Errorf("bob's list: %v", bobList)
	}
	aliceList := listedTools(t, ep.Handle(ctx, alice, request(2, "tools/list", map[string]any{}), newRecorder()))
	if !slices.Contains(aliceList, "b__echo") || slices.Contains(aliceList, "b__sleep") || slices.Contains(aliceList, "a__crash") {
		t.Errorf("alice's list: %v", aliceList)
	}

	bCalls := func() (n uint64) {
		for _, c := range w.fleet.Get("b").Telemetry().Calls() {
			n += c
		}
		return n
	}
	before := bCalls()
	if resp := call(bob, 3, "a__echo", `{"text":"hi"}`); resp.Error != nil {
		t.Errorf("bob's allowed call: %s", resp.Encode())
	}
	for _, c := range []struct{ who, name, args string }{
		{"bob", "a__crash", `{}`},
		{"bob", `a__cr\u0061sh`, `{}`}, // the same name, escaped
		{"bob", "b__echo", `{"text":"ok"}`},
		{"alice", "b__echo", `{"text":"no"}`},
		{"alice", "b__echo", `{}`},   // no text: the rule fails, closed
		{"alice", "b__echo", `"ok"`}, // arguments not an object
	} {
		s := map[string]*Session{"bob": bob, "alice": alice}[c.who]
		if resp := call(s, 4, c.name, c.args); !denied(resp) {
			t.Errorf("%s calling %s %s: %s, want not permitted", c.who, c.name, c.args, resp.Encode())
		}
	}
	// Methods mcpvisor does not know are decided by what they name: a
	// denied tool's name, renamed to the server's, is denied.
	aCalls := func() (n uint64) {
		for _, c := range w.fleet.Get("a").Telemetry().Calls() {
			n += c
		}
		return n
	}
	beforeA := aCalls()
	for _, m := range []*rpc.Message{
		{ID: json.RawMessage(`"d1"`), Method: "tools/describe", Params: json.RawMessage(`{"name":"a__crash"}`)},
		{ID: json.RawMessage(`"d2"`), Method: "x/inspect", Params: json.RawMessage(`{"name":"a__crash"}`)},
	} {
		if resp := ep.Handle(ctx, bob, m, newRecorder()); !denied(resp) {
			t.Errorf("bob's %s of a__crash: %s, want not permitted", m.Method, resp.Encode())
		}
	}
	dup := &rpc.Message{ID: json.RawMessage(`"d3"`), Method: "tools/call", Params: json.RawMessage(`{"name":"a__crash","name":"a__echo","arguments":{}}`)}
	if resp := ep.Handle(ctx, bob, dup, newRecorder()); resp.Error == nil || resp.Error.Code != rpc.InvalidParams || !strings.Contains(resp.Error.Message, "twice") {
		t.Errorf("a call naming two tools: %s", resp.Encode())
	}
	if n := aCalls() - beforeA; n != 0 {
		t.Errorf("denied requests of unknown methods reached a: %d", n)
	}
	if n := bCalls() - before; n != 0 {
		t.Errorf("denied calls reached b: %d calls", n)
	}
	if resp := call(alice, 5, "b__echo", `{"text":"ok, alice"}`); resp.Error != nil {
		t.Errorf("alice's allowed call: %s", resp.Encode())
	}

	// The server's own endpoint: the same rules, the same lists; bob,
	// who may use nothing of b, is refused there whatever he asks.
	single := w.gw.Single("b")
	sb := single.Open(newRecorder())
	defer single.Close(sb)
	sb.SetIdentity(bob.Identity())
	if resp := single.Handle(ctx, sb, request(6, "tools/list", map[string]any{}), newRecorder()); !denied(resp) {
		t.Errorf("bob's list of b's own endpoint: %s, want not permitted", resp.Encode())
	}
	sa := single.Open(newRecorder())
	defer single.Close(sa)
	sa.SetIdentity(alice.Identity())
	if names := listedTools(t, single.Handle(ctx, sa, request(8, "tools/list", map[string]any{}), newRecorder())); !slices.Equal(names, []string{"echo"}) {
		t.Errorf("alice's list of b's own endpoint: %v, want [echo]", names)
	}
	if resp := single.Handle(ctx, sb, &rpc.Message{ID: json.RawMessage(`7`), Method: "tools/call", Params: json.RawMessage(`{"name":"echo","arguments":{"text":"ok"}}`)}, newRecorder()); !denied(resp) {
		t.Errorf("bob on b's own endpoint: %s", resp.Encode())
	}
}

// A subscriptions/listen stream's resource subscriptions are the
// client's requests: decided as its identity's, so a URI the policy
// denies it is not subscribed to nor acknowledged (another identity's
// stream takes it).
func TestListenSubscriptionsAreDecidedAsTheClient(t *testing.T) {
	w := newWorld(t, `{"c":{"command":"$CONFORMANCE"}}`)
	w.gw.SetPolicy(mustPolicy(t, policy.Rule{Name: "bob not watched", Effect: policy.Deny,
		When: `identity.sub == "bob" && resource == "test://watched-resource"`}))
	h := NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{})
	defer h.Close()
	body := `{"jsonrpc":"2.0","id":"r","method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":["test://watched-resource"]},` + modernMeta(`{}`) + `}}`
	for who, want := range map[string]bool{"bob": false, "alice": true} {
		ctx, cancel := context.WithCancel(t.Context())
		ch := sseEvents(t, ctx, asUser(t, h, testUsers[who]), body, modernHeaders("subscriptions/listen", ""))
		ack := nextEvent(t, ch)
		cancel()
		if !strings.Contains(ack, `"notifications/subscriptions/acknowledged"`) || strings.Contains(ack, `"resourceSubscriptions":["test://watched-resource"]`) != want {
			t.Errorf("%s's acknowledgement: %s, want the subscription taken: %v", who, ack, want)
		}
	}
}

// The policy reads a call's arguments from its body, never from its
// Mcp-Param headers: a denied value in the body is refused whatever the
// header says (agreeing, disagreeing or absent), and a header naming a
// denied value cannot make an allowed body's call one.
func TestPolicyReadsTheBodyNotTheHeaders(t *testing.T) {
	w := newMRTRWorld(t)
	w.gw.SetPolicy(mustPolicy(t, policy.Rule{Name: "not eu", Effect: policy.Deny,
		When: `tool == "test_x_mcp_header" && arguments.region == "eu-west1"`}))
	call := func(region string, hdr map[string]string) *rpc.Message {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"test_x_mcp_header","arguments":{"region":` + mustJSONString(region) + `},` + modernMeta(`{}`) + `}}`
		req, _ := http.NewRequest("POST", w.url, strings.NewReader(body))
		for k, v := range modernHeaders("tools/call", "test_x_mcp_header") {
			req.Header.Set(k, v)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return decodeBody(t, resp)
	}
	for name, hdr := range map[string]map[string]string{
		"agreeing":    {"Mcp-Param-Region": "eu-west1"},
		"disagreeing": {"Mcp-Param-Region": "us-west1"},
		"absent":      nil,
	} {
		if m := call("eu-west1", hdr); m.Error == nil {
			t.Errorf("a denied body with a header %s: %s", name, m.Encode())
		}
	}
	if m := call("us-west1", map[string]string{"Mcp-Param-Region": "us-west1"}); m.Error != nil {
		t.Errorf("an allowed call: %s", m.Encode())
	}
	if m := call("us-west1", map[string]string{"Mcp-Param-Region": "eu-west1"}); m.Error == nil || m.Error.Code != rpc.HeaderMismatch {
		t.Errorf("an allowed body with a denied header: %s", m.Encode())
	}
}

// Over a rate limit a call gets JSON-RPC -32013 with retryAfter (what a
// stdio client gets; HTTP adds 429), reaches no server, and another
// identity's calls are not limited by it.
func TestRateLimitAnswersAJSONRPCError(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	w.gw.SetLimits(ratelimit.New(ratelimit.Limits{PerTool: ratelimit.Rate{PerSecond: 0.001, Burst: 1}}))
	ep := w.gw.Aggregate()
	ctx := context.Background()
	open := func(who string) *Session {
		s := ep.Open(newRecorder())
		t.Cleanup(func() { ep.Close(s) })
		s.SetIdentity(testUsers[who])
		return s
	}
	alice, bob := open("alice"), open("bob")
	call := func(s *Session) *rpc.Message {
		return ep.Handle(ctx, s, request(1, "tools/call", map[string]any{"name": "a__echo", "arguments": map[string]any{"text": "x"}}), newRecorder())
	}
	if resp := call(alice); resp.Error != nil {
		t.Fatalf("alice's first call: %s", resp.Encode())
	}
	resp := call(alice)
	if resp.Error == nil || resp.Error.Code != rpc.RateLimited || retryAfterOf(resp) < 1 {
		t.Fatalf("alice's second call: %s", resp.Encode())
	}
	if resp := call(bob); resp.Error != nil {
		t.Errorf("bob's call: %s", resp.Encode())
	}
}

// Each request is decided by its own token's claims: a legacy session
// initialized with a token whose groups the policy allows is not allowed
// a call by the same person's later token without them (a group
// revoked), and is by a token with them again.
func TestSessionRequestsAreDecidedByTheirOwnToken(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	w.gw.SetPolicy(mustPolicy(t, policy.Rule{Name: "ops", Effect: policy.Allow, When: `"ops" in identity.groups`}))
	withOps := (&identity.Identity{Kind: identity.Token, Issuer: "https://as", Subject: "alice", ClientID: "c1", Groups: []string{"ops"}}).Finish()
	without := (&identity.Identity{Kind: identity.Token, Issuer: "https://as", Subject: "alice", ClientID: "c1"}).Finish()
	h := NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{})
	defer h.Close()
	urlOps, urlWithout := asUser(t, h, withOps), asUser(t, h, without)
	dummy := httptest.NewServer(http.NotFoundHandler()) // its Client only
	defer dummy.Close()
	s := &httpTestServer{t: t, h: h, url: urlOps, srv: dummy}
	sid := s.initialize()
	call := func(url string) string {
		s.url = url
		resp := s.do("POST", sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":"x"}}}`, nil)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := call(urlOps); strings.Contains(got, `"error"`) {
		t.Fatalf("with ops: %s", got)
	}
	if got := call(urlWithout); !strings.Contains(got, `"code":-32012`) {
		t.Errorf("the same session by a token without ops: %s", got)
	}
	if got := call(urlOps); strings.Contains(got, `"error"`) {
		t.Errorf("with ops again: %s", got)
	}
}

// With an identity's bucket empty, its calls are shed with 429 before
// they are read, but nothing else it POSTs is: a notification (a
// cancellation, an answer to the server's question) still gets through.
func TestShedOnlyCalls(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	w.gw.SetLimits(ratelimit.New(ratelimit.Limits{PerIdentity: ratelimit.Rate{PerSecond: 0.001, Burst: 1}}))
	h := NewStreamableHandler(w.gw.Aggregate(), HTTPOptions{})
	defer h.Close()
	url := asUser(t, h, testUsers["alice"])
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":"x"},` + modernMeta(`{}`) + `}}`
	if resp, b := postModern(t, url, call, "tools/call", "a__echo"); resp.StatusCode != 200 || strings.Contains(string(b), `"error"`) {
		t.Fatalf("the first call: %d %s", resp.StatusCode, b)
	}
	resp, b := postModern(t, url, call, "tools/call", "a__echo")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("the second call: %d %s", resp.StatusCode, b)
	}
	note := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,` + modernMeta(`{}`) + `}}`
	if resp, b := postModern(t, url, note, "notifications/cancelled", ""); resp.StatusCode == http.StatusTooManyRequests {
		t.Errorf("a notification was shed: %d %s", resp.StatusCode, b)
	}
}

// Under a policy, a shared server's log line no one request is known to
// have caused reaches no client — it might tell of another identity's
// call — while without one it reaches every session that asked for the
// server's lines.
func TestUnattributedLogLinesUnderAPolicy(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"}}`)
	ep := w.gw.Aggregate()
	out := newRecorder()
	bob := ep.Open(out)
	defer ep.Close(bob)
	bob.SetIdentity(testUsers["bob"])
	if resp := ep.Handle(context.Background(), bob, request(1, "logging/setLevel", map[string]any{"level": "debug"}), newRecorder()); resp.Error != nil {
		t.Fatal(resp.Error)
	}
	line := &rpc.Message{Method: "notifications/message", Params: json.RawMessage(`{"level":"info","data":"alice's secret call"}`)}
	src := fleet.Source{Server: w.fleet.Get("a")}
	got := func() bool {
		select {
		case <-out.got:
			return true
		default:
			return false
		}
	}
	w.gw.relayLog(src, line) // synchronous: delivered, or not, by its return
	if !got() {
		t.Fatal("without a policy the server's own line did not reach the session that asked for it")
	}
	w.gw.SetPolicy(mustPolicy(t, policy.Rule{Effect: policy.Allow, When: `identity.sub == "alice"`}))
	w.gw.relayLog(src, line)
	if got() {
		t.Error("under a policy an unattributed line reached another identity")
	}
}

func TestDuplicateKeys(t *testing.T) {
	for raw, want := range map[string]bool{
		`{"name":"a","arguments":{"x":1}}`:                 false,
		`{"name":"crash","name":"echo"}`:                   true,
		`{"name":"a","arguments":{"x":1,"x":2}}`:           true,
		`{"name":"a","arguments":{"p":[{"k":1,"k":2}]}}`:   true,
		`{"name":"a","arguments":{"p":[{"k":1},{"k":2}]}}`: false,
		`{"a":{"b":{"c":1}},"b":2}`:                        false,
		``:                                                 false,
	} {
		if got := duplicateKeys(json.RawMessage(raw)); got != want {
			t.Errorf("duplicateKeys(%s) = %v, want %v", raw, got, want)
		}
	}
}

// The aggregate keeps each identity's filtered list with its table: an
// answer kept for one identity never reaches another, nor the same
// person with other claims or scopes, nor anyone under another policy or
// other server scopes; and what is kept stays within its bound.
func TestKeptListsAreTheIdentitys(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"},"b":{"command":"$FIXTURE"}}`)
	w.gw.SetPolicy(mustPolicy(t,
		policy.Rule{Name: "a for all", Effect: policy.Allow, When: `server == "a"`},
		policy.Rule{Name: "ops", Effect: policy.Allow, When: `"ops" in identity.groups`},
	))
	ctx := context.Background()
	ep := w.gw.Aggregate()
	s := ep.Open(newRecorder())
	defer ep.Close(s)
	user := func(sub string, groups, scopes []string) *identity.Identity {
		return (&identity.Identity{Kind: identity.Token, Issuer: "https://as", Subject: sub, ClientID: "c", Groups: groups, Scopes: scopes}).Finish()
	}
	n := 0
	seesB := func(who *identity.Identity) bool {
		s.SetIdentity(who)
		n++
		names := listedTools(t, ep.Handle(ctx, s, request(n, "tools/list", map[string]any{}), newRecorder()))
		if !slices.Contains(names, "a__echo") {
			t.Fatalf("%s is not listed a__echo: %v", who.Name(), names)
		}
		return slices.Contains(names, "b__echo")
	}
	carol, dana := user("carol", nil, nil), user("dana", []string{"ops"}, nil)
	for range 2 { // the second time from what is kept
		if seesB(carol) || !seesB(dana) {
			t.Fatal("carol sees b, or dana does not")
		}
	}
	if !seesB(user("carol", []string{"ops"}, nil)) {
		t.Error("carol, now in ops, was given her old list")
	}
	if seesB(user("dana", nil, nil)) {
		t.Error("dana, out of ops, was given her old list")
	}
	w.gw.SetPolicy(mustPolicy(t, policy.Rule{Name: "a only", Effect: policy.Allow, When: `server == "a"`}))
	if seesB(dana) {
		t.Error("dana was given a list kept under the policy before")
	}
	w.gw.SetPolicy(mustPolicy(t, policy.Rule{Name: "all", Effect: policy.Allow, When: `true`}))
	w.gw.SetServerScopes(func(server string) []string {
		if server == "b" {
			return []string{"b:use"}
		}
		return nil
	})
	if seesB(dana) || !seesB(user("dana", []string{"ops"}, []string{"b:use"})) {
		t.Error("b's scope: listed without it, or not with it")
	}
	// Scopes are told apart whole: "b:use x" is not "b:use" and "x".
	if !seesB(user("dana", []string{"ops"}, []string{"b:use", "x"})) || seesB(user("dana", []string{"ops"}, []string{"b:use x"})) {
		t.Error(`b's scope: ["b:use x"] was given the list of ["b:use","x"]`)
	}
	// An answer made under the rules before a reload, kept after a list
	// of the new rules, does not take the new rules' place.
	if tb := keptTable(w.gw); tb != nil {
		tb.visMu.Lock()
		now := tb.visFor
		tb.visMu.Unlock()
		older := now
		older.gen--
		tb.keepVisible(older, visKey{identity: "late"}, visList{})
		tb.visMu.Lock()
		_, late := tb.vis[visKey{identity: "late"}]
		after := tb.visFor
		tb.visMu.Unlock()
		if late || after != now {
			t.Error("a late answer of older rules replaced the kept ones")
		}
	} else {
		t.Error("no tools table")
	}
	w.gw.SetServerScopes(nil)
	if !seesB(dana) {
		t.Error("dana was given a list kept under the server scopes before")
	}

	// Sessions of identities in and out of ops list at once, while the
	// kept answers are made and read.
	w.gw.SetPolicy(mustPolicy(t,
		policy.Rule{Name: "a for all", Effect: policy.Allow, When: `server == "a"`},
		policy.Rule{Name: "ops", Effect: policy.Allow, When: `"ops" in identity.groups`},
	))
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Go(func() {
			gs := ep.Open(newRecorder())
			defer ep.Close(gs)
			ops := g%2 == 0
			var groups []string
			if ops {
				groups = []string{"ops"}
			}
			gs.SetIdentity(user(fmt.Sprint("g", g%4), groups, nil))
			for i := range 20 {
				resp := ep.Handle(ctx, gs, request(1000+100*g+i, "tools/list", map[string]any{}), newRecorder())
				var res struct {
					Tools []struct{ Name string } `json:"tools"`
				}
				if resp.Error != nil || json.Unmarshal(resp.Result, &res) != nil {
					errs <- "a list failed"
					return
				}
				if slices.ContainsFunc(res.Tools, func(t struct{ Name string }) bool { return t.Name == "b__echo" }) != ops {
					errs <- fmt.Sprintf("g%d (ops %v) was given another's list", g, ops)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}

	// The bound: answers count their items and themselves, an empty
	// answer too; one larger than the bound is not kept and drops
	// nothing; a reload's first list lets the old policy's answers go.
	t1 := keptTable(w.gw)
	if t1 == nil {
		t.Fatal("no tools table")
	}
	kept := func() (answers, cost, counted int, under *policy.Policy) {
		t1.visMu.Lock()
		defer t1.visMu.Unlock()
		for _, l := range t1.vis {
			cost += l.cost()
		}
		return len(t1.vis), cost, t1.visCost, t1.visFor.policy
	}
	perSub := mustPolicy(t, policy.Rule{Name: "each their own", Effect: policy.Allow, When: `identity.sub != "nobody"`})
	w.gw.SetPolicy(perSub)
	full := len(t1.items)
	defer func(v int) { maxVisCost = v }(maxVisCost)
	maxVisCost = 2*(full+1) + 1 // two full answers
	for i := range 5 {
		if !seesB(user(fmt.Sprint("u", i), nil, nil)) {
			t.Errorf("u%d does not see b", i)
		}
	}
	if n, cost, counted, under := kept(); n != 2 || cost != counted || cost > maxVisCost || under != perSub {
		t.Errorf("%d answers kept, cost %d (counted %d), under %p; want 2 within %d, under %p", n, cost, counted, under, maxVisCost, perSub)
	}
	// Empty answers count: a policy showing nothing, and many identities.
	none := mustPolicy(t, policy.Rule{Name: "none", Effect: policy.Allow, When: `identity.sub == "nobody"`})
	w.gw.SetPolicy(none)
	maxVisCost = 10
	for i := range 30 {
		s.SetIdentity(user(fmt.Sprint("e", i), nil, nil))
		n++
		if names := listedTools(t, ep.Handle(ctx, s, request(n, "tools/list", map[string]any{}), newRecorder())); len(names) != 0 {
			t.Fatalf("e%d is listed %v under a policy that allows nobody", i, names)
		}
	}
	if n, cost, counted, under := kept(); n != 10 || cost != counted || under != none {
		t.Errorf("%d empty answers kept, cost %d (counted %d); want 10 of cost 1 each, under the last policy", n, cost, counted)
	}
	// An answer past the bound is not kept, and drops none.
	w.gw.SetPolicy(perSub)
	maxVisCost = full // less than one full answer
	seesB(user("big", nil, nil))
	if n, _, _, _ := kept(); n != 10 {
		t.Errorf("an answer past the bound: %d kept, want the 10 before", n)
	}
}

// A server's own endpoint refuses everything but ping to an identity the
// policy lets use nothing of the server, before an instance starts for
// it: initialize of a per-session server starts no process. Others use
// it as before.
func TestUnusableServersEndpointStartsNothing(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE"},"p":{"command":"$FIXTURE","sharing":"per-session"}}`)
	w.gw.SetPolicy(mustPolicy(t,
		policy.Rule{Name: "a for all", Effect: policy.Allow, When: `server == "a"`},
		policy.Rule{Name: "p for ops", Effect: policy.Allow, When: `server == "p" && "ops" in identity.groups`},
	))
	ctx := context.Background()
	user := func(sub string, groups ...string) *identity.Identity {
		return (&identity.Identity{Kind: identity.Token, Issuer: "https://as", Subject: sub, ClientID: "c", Groups: groups}).Finish()
	}
	init := func(ep Endpoint, who *identity.Identity) (*Session, *rpc.Message) {
		s := ep.Open(newRecorder())
		t.Cleanup(func() { ep.Close(s) })
		s.SetIdentity(who)
		return s, ep.Handle(ctx, s, request(1, "initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}}), newRecorder())
	}
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := audit.Open(audit.Options{File: auditFile})
	if err != nil {
		t.Fatal(err)
	}
	w.gw.SetAudit(log)
	p := w.gw.Single("p")
	bob := user("bob")
	s, resp := init(p, bob)
	if resp.Error == nil || resp.Error.Code != rpc.NotPermitted || resp.Error.Message != "not permitted" {
		t.Fatalf("bob's initialize of p: %s, want not permitted", resp.Encode())
	}
	for _, m := range []string{"tools/list", "tools/call", "resources/list"} {
		if resp := p.Handle(ctx, s, request(2, m, map[string]any{"name": "echo"}), newRecorder()); resp.Error == nil || resp.Error.Code != rpc.NotPermitted {
			t.Errorf("bob's %s on p: %s, want not permitted", m, resp.Encode())
		}
	}
	if resp := p.Handle(ctx, s, request(3, "ping", nil), newRecorder()); resp.Error != nil {
		t.Errorf("bob's ping on p: %s", resp.Encode())
	}
	if st := w.fleet.Get("p").Status(); st.Sessions != 0 || st.PID != 0 {
		t.Errorf("p started for bob: %+v", st)
	}
	if _, resp := init(w.gw.Single("a"), bob); resp.Error != nil {
		t.Errorf("bob's initialize of a: %s", resp.Encode())
	}
	if _, resp := init(p, user("olga", "ops")); resp.Error != nil {
		t.Errorf("olga's initialize of p: %s", resp.Encode())
	}
	if w.gw.Denials() == 0 {
		t.Error("the refusals are not counted")
	}
	// Each refusal is in the audit, as bob's, naming p and the method.
	w.gw.SetAudit(nil)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := log.Close(cctx); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	var methods []string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var rec struct{ Identity, Server, Method, Outcome string }
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Identity != "bob" || rec.Server != "p" || rec.Outcome != "denied" {
			t.Fatalf("audit line %q", line)
		}
		methods = append(methods, rec.Method)
	}
	if want := []string{"initialize", "tools/list", "tools/call", "resources/list"}; !slices.Equal(methods, want) {
		t.Errorf("audited %v, want %v", methods, want)
	}
}

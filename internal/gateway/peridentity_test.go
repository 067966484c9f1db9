package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/identity"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// A per-identity server serves each identity from its own process, shared
// by that identity's sessions, started with that identity's values; what
// the process sends on its own (a log line after its call) reaches that
// identity's sessions and never another's.
func TestPerIdentityServerThroughTheGateway(t *testing.T) {
	w := newWorld(t, `{"a":{"command":"$FIXTURE","sharing":"per-identity","env":{"FIXTURE_TAG":"${identity.sub}"}}}`)
	w.gw.reg.linger = 50 * time.Millisecond
	ep := w.gw.Aggregate()
	alice := (&identity.Identity{Kind: identity.Token, Issuer: "https://as", Subject: "alice", ClientID: "c1", UID: -1}).Finish()
	aliceOther := (&identity.Identity{Kind: identity.Token, Issuer: "https://as", Subject: "alice", ClientID: "c2", UID: -1}).Finish()
	bob := (&identity.Identity{Kind: identity.Token, Issuer: "https://as", Subject: "bob", ClientID: "c1", UID: -1}).Finish()
	outA, outA2, outB := newRecorder(), newRecorder(), newRecorder()
	a, a2, b := ep.Open(outA), ep.Open(outA2), ep.Open(outB)
	a.SetIdentity(alice)
	a2.SetIdentity(aliceOther)
	b.SetIdentity(bob)
	defer ep.Close(a)
	defer ep.Close(a2)
	defer ep.Close(b)
	id := 0
	handle := func(s *Session, method string, params any) *rpc.Message {
		t.Helper()
		id++
		resp := ep.Handle(context.Background(), s, request(id, method, params), newRecorder())
		if resp.Error != nil {
			t.Fatalf("%s: %v", method, resp.Error)
		}
		return resp
	}
	for _, s := range []*Session{a, a2, b} {
		handle(s, "logging/setLevel", map[string]any{"level": "info"})
		handle(s, "tools/call", map[string]any{"name": "a__echo", "arguments": map[string]any{"text": "hi"}})
	}
	ids := w.fleet.Get("a").Status().Identities
	if len(ids) != 2 || ids[0].Name != "alice" || ids[1].Name != "bob" || ids[0].PID == ids[1].PID || ids[0].Requests != 2 || ids[1].Requests != 1 {
		t.Fatalf("instances %+v; want alice's (two sessions' calls) and bob's", ids)
	}
	// The process's own line, sent once its call was answered, goes to
	// the identity's sessions that asked for the log.
	handle(a, "tools/call", map[string]any{"name": "a__log", "arguments": map[string]any{"text": "alice-line", "laterMs": 200}})
	// (The line during the call may reach them too: two of alice's
	// sessions used the process lately, so it is no one call's.)
	later := func(out *recorder, text string) {
		t.Helper()
		for {
			m := out.next(t, "notifications/message", 5*time.Second)
			if !strings.Contains(string(m.Params), text) {
				t.Fatalf("a session of another identity's got %s", m.Params)
			}
			if strings.Contains(string(m.Params), text+" (later)") {
				return
			}
		}
	}
	later(outA, "alice-line")
	later(outA2, "alice-line")
	handle(b, "tools/call", map[string]any{"name": "a__log", "arguments": map[string]any{"text": "bob-line", "laterMs": 200}})
	later(outB, "bob-line")
	// Calls answered after the lines were relayed: everything sent before
	// has been delivered by now.
	handle(a, "tools/call", map[string]any{"name": "a__echo", "arguments": map[string]any{"text": "sync"}})
	handle(b, "tools/call", map[string]any{"name": "a__echo", "arguments": map[string]any{"text": "sync"}})
	for name, out := range map[string]*recorder{"alice": outA, "alice (other client)": outA2, "bob": outB} {
		out.mu.Lock()
		for _, m := range out.msgs {
			if m.Method != "notifications/message" {
				continue
			}
			if strings.Contains(name, "alice") != strings.Contains(string(m.Params), "alice-line") {
				t.Errorf("%s's session got %s", name, m.Params)
			}
		}
		out.mu.Unlock()
	}
	if n := outB.count("notifications/message"); n == 0 {
		t.Error("bob's session got none of its own lines")
	}
}

// A per-identity server's resource update reaches its identity's
// subscribed session: the book told that identity's process of its
// subscription, and the update comes back to the session that asked.
func TestPerIdentityResourceUpdateReachesItsSubscriber(t *testing.T) {
	w := newWorld(t, `{"c":{"command":"$CONFORMANCE","protocol":"legacy","sharing":"per-identity"}}`)
	ep := w.gw.Aggregate()
	out := newRecorder()
	s := ep.Open(out)
	defer ep.Close(s)
	s.SetIdentity(testUsers["alice"])
	resp := ep.Handle(context.Background(), s, request(1, "resources/subscribe", map[string]any{"uri": "test://watched-resource"}), newRecorder())
	if resp.Error != nil {
		t.Fatalf("subscribe: %v", resp.Error)
	}
	if got := w.gw.interests.InstanceSubscriptions(w.fleet.Get("c"), bookInstance(w.fleet.Get("c"), legacySender(s))); len(got) != 1 {
		t.Fatalf("alice's instance is told %v", got)
	}
	m := out.next(t, "notifications/resources/updated", 20*time.Second)
	if !strings.Contains(string(m.Params), "test://watched-resource") {
		t.Fatalf("update %s", m.Params)
	}
}

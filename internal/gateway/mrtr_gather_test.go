package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

const allInputCaps = `{"elicitation":{},"sampling":{},"roots":{}}`

// inputRequests reads an input_required result's inputs, by key, and its
// requestState.
func inputRequests(t *testing.T, m *rpc.Message) (map[string]string, string) {
	t.Helper()
	var r struct {
		ResultType    string `json:"resultType"`
		InputRequests map[string]struct {
			Method string `json:"method"`
		} `json:"inputRequests"`
		RequestState string `json:"requestState"`
	}
	if m.Error != nil || json.Unmarshal(m.Result, &r) != nil || r.ResultType != "input_required" || r.RequestState == "" {
		t.Fatalf("want input_required: %s", m.Encode())
	}
	out := map[string]string{}
	for k, v := range r.InputRequests {
		out[k] = v.Method
	}
	return out, r.RequestState
}

// answersFor answers each input of reqs as a client would.
func answersFor(reqs map[string]string) string {
	var parts []string
	for k, method := range reqs {
		var v string
		switch method {
		case "elicitation/create":
			v = `{"action":"accept","content":{"name":"Ada"}}`
		case "sampling/createMessage":
			v = `{"role":"assistant","content":{"type":"text","text":"Hello"},"model":"m","stopReason":"endTurn"}`
		case "roots/list":
			v = `{"roots":[{"uri":"file:///r","name":"r"}]}`
		}
		parts = append(parts, mustJSONString(k)+":"+v)
	}
	return `{` + strings.Join(parts, ",") + `}`
}

// A legacy server that sends several requests at once while it serves one
// call (the go-sdk asks for every input of a round concurrently) has them
// all in one input_required round, not one round each — a client that
// answers a round in full gets the result on its first retry.
func TestMRTRBridgeGathersConcurrentRequests(t *testing.T) {
	w := newMRTRWorld(t)
	const tool = "test_input_required_result_multiple_inputs"
	reqs, state := inputRequests(t, w.callTool("1", tool, `{}`, "", allInputCaps))
	methods := map[string]bool{}
	for _, m := range reqs {
		methods[m] = true
	}
	if len(reqs) != 3 || len(methods) != 3 {
		t.Fatalf("one round with the server's 3 requests, got %v", reqs)
	}
	m := w.callTool("2", tool, `{}`, `,"requestState":`+mustJSONString(state)+`,"inputResponses":`+answersFor(reqs), allInputCaps)
	if m.Error != nil || !strings.Contains(string(m.Result), `"resultType":"complete"`) || !strings.Contains(string(m.Result), "Ada") {
		t.Fatalf("final result: %s", m.Encode())
	}
	w.heldCalls(0)
}

// A held call whose client never comes back (it has its round and owes the
// answer) does not make a shared legacy server's later requests
// unattributable: the server waits for that call's answer, so a request it
// sends meanwhile while another client's call is in flight is that call's.
// Without this, one abandoned round refuses every other modern client's
// sampling, elicitation and roots on the server for the whole hold bound.
func TestMRTRAbandonedRoundLeavesServerUsable(t *testing.T) {
	w := newMRTRWorld(t)
	// The first client leaves its round unanswered.
	key, _, state := inputRequired(t, w.call("1", "", `{"elicitation":{}}`))
	w.heldCalls(1)
	// Others, one after another, each get their own round and result.
	for i, tool := range []string{"test_input_required_result_sampling", "test_input_required_result_list_roots", "test_input_required_result_multiple_inputs"} {
		id := json.Number(string(rune('2' + i))).String()
		reqs, state := inputRequests(t, w.callTool(id, tool, `{}`, "", allInputCaps))
		m := w.callTool(id, tool, `{}`, `,"requestState":`+mustJSONString(state)+`,"inputResponses":`+answersFor(reqs), allInputCaps)
		if m.Error != nil || !strings.Contains(string(m.Result), `"resultType":"complete"`) {
			t.Fatalf("%s: final result: %s", tool, m.Encode())
		}
	}
	// Its call is still held for it, untouched: its answer, late, ends it.
	w.heldCalls(1)
	m := w.call("9", `,"requestState":`+mustJSONString(state)+`,"inputResponses":{`+mustJSONString(key)+`:`+acceptUser+`}`, `{"elicitation":{}}`)
	if m.Error != nil || !strings.Contains(string(m.Result), "ada") {
		t.Fatalf("the first client's result: %s", m.Encode())
	}
	w.heldCalls(0)
}

// Clients whose calls are in flight at once on a shared legacy server
// that asks for input: a request nobody can attribute is refused to the
// server, and a round a client gets holds only requests its own call
// caused — half the clients call a tool whose sampling asks for the
// capital of France, half one whose asks for a greeting, and neither sees
// the other's.
func TestMRTRConcurrentRoundsStayApart(t *testing.T) {
	w := newMRTRWorld(t)
	tools := map[string]string{
		"test_input_required_result_sampling":        "capital of France",
		"test_input_required_result_multiple_inputs": "Generate a greeting",
	}
	names := []string{"test_input_required_result_sampling", "test_input_required_result_multiple_inputs"}
	var wg sync.WaitGroup
	results := make([]*rpc.Message, 12)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = w.callTool(`"c`+string(rune('a'+i))+`"`, names[i%2], `{}`, "", allInputCaps)
		}()
	}
	wg.Wait()
	rounds := 0
	for i, m := range results {
		if m.Error != nil {
			if !strings.Contains(m.Error.Message, "cannot tell which") {
				t.Fatalf("an error other than the refusal: %s", m.Encode())
			}
			continue
		}
		var r struct {
			InputRequests map[string]struct {
				Method string          `json:"method"`
				Params json.RawMessage `json:"params"`
			} `json:"inputRequests"`
		}
		if json.Unmarshal(m.Result, &r) != nil {
			t.Fatalf("result %s", m.Result)
		}
		if !strings.Contains(string(m.Result), `"input_required"`) {
			continue // the call ended (the server was refused)
		}
		rounds++
		seen := map[string]bool{}
		for _, in := range r.InputRequests {
			if seen[in.Method] {
				t.Fatalf("a round with two %s requests: %s", in.Method, m.Result)
			}
			seen[in.Method] = true
			if in.Method == "sampling/createMessage" && !strings.Contains(string(in.Params), tools[names[i%2]]) {
				t.Fatalf("%s got another call's sampling request: %s", names[i%2], in.Params)
			}
		}
	}
	t.Logf("%d of %d calls got a round", rounds, len(results))
}

// A modern client's call that the server has asked nothing of is bound to
// the client's request: the client going away cancels it at the server
// (the lease is released, nothing is held) — not at the hold bound, not
// at the server's own pace.
func TestModernCallEndsWithItsRequest(t *testing.T) {
	w := newMRTRWorldConfig(t, `{"x":{"command":"$FIXTURE","prefix":""}}`)
	ctx, cancel := context.WithCancel(t.Context())
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":60000},` + modernMeta(`{}`) + `}}`
	req, _ := http.NewRequestWithContext(ctx, "POST", w.url, strings.NewReader(body))
	for k, v := range modernHeaders("tools/call", "sleep") {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", httpAccept)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	srv := w.fleet.Get("x")
	calls := func() int {
		w.gw.mu.Lock()
		defer w.gw.mu.Unlock()
		n := 0
		for _, list := range w.gw.calls {
			n += len(list)
		}
		return n
	}
	waitFor(t, "the call in flight", func() bool { return calls() == 1 })
	cancel()
	<-done
	waitFor(t, "the call ended at the server", func() bool { return calls() == 0 && srv.Status().InFlight == 0 })
	if n := w.gw.HeldCalls(); n != 0 {
		t.Fatalf("%d calls held", n)
	}
}

// A server request that comes at once — before the call's answer is even
// waited for — still makes the round: the wait cannot miss it.
func TestMRTRRequestBeforeTheWait(t *testing.T) {
	w := newMRTRWorld(t)
	testHookStarted = func(h *heldCall) {
		waitFor(t, "the server's request", func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return len(h.pending) > 0
		})
	}
	t.Cleanup(func() { testHookStarted = nil })
	got := make(chan *rpc.Message, 1)
	go func() { got <- w.call("1", "", `{"elicitation":{}}`) }()
	select {
	case m := <-got:
		if _, method, _ := inputRequired(t, m); method != "elicitation/create" {
			t.Fatalf("round asks for %s", method)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the call waited for an answer its server will not give before its client's input")
	}
}

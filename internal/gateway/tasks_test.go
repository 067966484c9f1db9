package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// tasksCaps declares the tasks extension (a 2026-07-28 client's
// capabilities).
const withTasks = `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`

// tasksServer is the config of a server running the tasks fixture.
func tasksServer(t *testing.T, extra string) string {
	return fmt.Sprintf(`{"command":"node","args":[%q,"stdio"]%s}`, testserver.TasksFixture(t), extra)
}

// modernRequest sends a 2026-07-28 request of method with params
// (without _meta) and the client capabilities caps to ep.
func modernRequest(t *testing.T, ep Endpoint, method string, params map[string]any, caps string) *rpc.Message {
	t.Helper()
	b, _ := json.Marshal(params)
	p := strings.TrimSuffix(string(b), "}")
	if len(params) > 0 {
		p += ","
	}
	p += modernMeta(caps) + "}"
	m := &rpc.Message{ID: json.RawMessage(`7`), Method: method, Params: json.RawMessage(p)}
	return ep.Stateless(t.Context(), m, mustModern(t, p), newRecorder())
}

// wantError fails t unless resp is a JSON-RPC error of code whose
// message says says.
func wantError(t *testing.T, what string, resp *rpc.Message, code int, says string) {
	t.Helper()
	if resp == nil || resp.Error == nil || resp.Error.Code != code || !strings.Contains(resp.Error.Message, says) {
		t.Errorf("%s: %+v (%s), want error %d saying %q", what, resp, resultOf(resp), code, says)
	}
}

func resultOf(resp *rpc.Message) string {
	if resp == nil {
		return "nil"
	}
	if resp.Error != nil {
		return resp.Error.Message
	}
	return string(resp.Result)
}

// startTask calls tool (slow_compute for 60 s) through ep as a modern
// client declaring the tasks extension, and returns the task id it got.
func startTask(t *testing.T, ep Endpoint, tool string) string {
	t.Helper()
	resp := modernRequest(t, ep, "tools/call", map[string]any{"name": tool, "arguments": map[string]any{"seconds": 60}}, withTasks)
	var r struct{ ResultType, TaskID, Status string }
	if resp == nil || resp.Error != nil || json.Unmarshal(resp.Result, &r) != nil || r.ResultType != "task" {
		t.Fatalf("%s: %s, want a task", tool, resultOf(resp))
	}
	if !strings.HasPrefix(r.TaskID, taskIDPrefix) || r.Status != "working" {
		t.Fatalf("%s: task %q in status %q, want one of mcpvisor's ids, working", tool, r.TaskID, r.Status)
	}
	return r.TaskID
}

// taskStatus is the status tasks/get through ep answers for id, or the
// error.
func taskGet(t *testing.T, ep Endpoint, id, caps string) (status string, resp *rpc.Message) {
	t.Helper()
	resp = modernRequest(t, ep, "tasks/get", map[string]any{"taskId": id}, caps)
	if resp.Error != nil {
		return "", resp
	}
	var r struct{ TaskID, Status string }
	if json.Unmarshal(resp.Result, &r) != nil || r.TaskID != id {
		t.Fatalf("tasks/get %s: %s, want the task under the same id", id, resultOf(resp))
	}
	return r.Status, resp
}

// A task's id routes tasks/* to the server that holds it, on /mcp and
// on that server's endpoint, and nowhere else: an id of another server on
// a server's endpoint, an id mcpvisor did not issue (altered, the
// server's own, another gateway's), and a request that did not declare
// the extension reach no server, each with an error that says why.
func TestTaskIDsRouteOnlyWhereTheyWereGiven(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, fmt.Sprintf(`{"a":%s,"b":%s}`, tasksServer(t, ""), tasksServer(t, "")))
	agg, a, b := w.gw.Aggregate(), w.gw.Single("a"), w.gw.Single("b")
	idA := startTask(t, agg, "a__slow_compute")
	idB := startTask(t, b, "slow_compute")
	for _, c := range []struct {
		ep   Endpoint
		name string
		id   string
	}{{agg, "/mcp", idA}, {agg, "/mcp", idB}, {a, "a's endpoint", idA}, {b, "b's endpoint", idB}} {
		if st, resp := taskGet(t, c.ep, c.id, withTasks); st != "working" {
			t.Errorf("tasks/get on %s: %s", c.name, resultOf(resp))
		}
	}
	_, resp := taskGet(t, b, idA, withTasks)
	wantError(t, "a's task on b's endpoint", resp, rpc.InvalidParams, "task of server a, not of this endpoint's server b")
	_, resp = taskGet(t, agg, idA, `{}`)
	wantError(t, "tasks/get without the extension", resp, rpc.MissingClientCapability, "io.modelcontextprotocol/tasks")
	if d := string(resp.Error.Data); !strings.Contains(d, `"requiredCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}`) {
		t.Errorf("-32021's data: %s", d)
	}
	// The server's own id (sealed in mcpvisor's: read here with the
	// gateway's key), mcpvisor's altered, and others.
	ref, ok := w.gw.parseTaskID(idA)
	if !ok || ref.Server != "a" || ref.Up == "" || ref.Run == 0 || strings.Contains(idA, ref.Up) {
		t.Fatalf("what the id says: %+v %v (the server's id must not show in %s)", ref, ok, idA)
	}
	flip := func(id string, i int) string {
		c := byte('A')
		if id[i] == 'A' {
			c = 'B'
		}
		return id[:i] + string(c) + id[i+1:]
	}
	other := New(nil).taskID(ref) // another gateway's key
	for what, id := range map[string]string{"the server's own id": ref.Up, "an id altered": flip(idA, len(taskIDPrefix)+20),
		"an id's last character altered": flip(idA, len(idA)-1), "an id padded": idA + "=", "another gateway's id": other,
		"an id cut short": idA[:len(idA)-3], "an id of nothing": "tasks-conformance-nonexistent-12345"} {
		for name, ep := range map[string]Endpoint{"/mcp": agg, "a's endpoint": a} {
			_, resp := taskGet(t, ep, id, withTasks)
			wantError(t, what+" on "+name, resp, rpc.InvalidParams, "not a task id mcpvisor issued")
		}
	}
	wantError(t, "tasks/get with no taskId", modernRequest(t, agg, "tasks/get", map[string]any{}, withTasks), rpc.InvalidParams, "params.taskId (a string) is required")
	wantError(t, "tasks/get with a number", modernRequest(t, agg, "tasks/get", map[string]any{"taskId": 7}, withTasks), rpc.InvalidParams, "params.taskId (a string) is required")
	for _, m := range []string{"tasks/result", "tasks/list"} {
		wantError(t, m, modernRequest(t, agg, m, map[string]any{"taskId": idA}, withTasks), rpc.MethodNotFound, "not part of MCP 2026-07-28")
	}
	// A legacy session may not use an id given to a 2026-07-28 request.
	s := openDeclaring(t, agg, newRecorder(), `{}`)
	defer agg.Close(s)
	resp = agg.Handle(t.Context(), s, request(8, "tasks/get", map[string]any{"taskId": idA}), newRecorder())
	wantError(t, "a legacy session using a modern request's task", resp, rpc.InvalidParams, "issued to a 2026-07-28 request, which has no session")
	// Cancelled through /mcp, it is cancelled at a's process.
	resp = modernRequest(t, agg, "tasks/cancel", map[string]any{"taskId": idA}, withTasks)
	if resp.Error != nil || strings.Contains(string(resp.Result), "taskId") {
		t.Fatalf("tasks/cancel: %s, want the empty ack", resultOf(resp))
	}
	if st, resp := taskGet(t, a, idA, withTasks); st != "cancelled" {
		t.Errorf("after tasks/cancel: %s", resultOf(resp))
	}
}

// A task whose process is gone is answered at once, naming why, and
// nothing is started for it: its server was stopped, restarted, or
// removed by a reload.
func TestTaskOfAGoneProcessIsAnsweredAtOnce(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, fmt.Sprintf(`{"a":%s,"b":%s}`, tasksServer(t, ""), tasksServer(t, "")))
	agg := w.gw.Aggregate()
	idA, idB := startTask(t, agg, "a__slow_compute"), startTask(t, agg, "b__slow_compute")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := w.fleet.Get("a").Restart(ctx); err != nil {
		t.Fatal(err)
	}
	_, resp := taskGet(t, agg, idA, withTasks)
	wantError(t, "a task of a restarted server", resp, rpc.InvalidParams, "server a has restarted since")
	if _, err := w.fleet.Get("a").Stop(ctx); err != nil {
		t.Fatal(err)
	}
	starts := w.count("a", "started")
	_, resp = taskGet(t, agg, idA, withTasks)
	wantError(t, "a task of a stopped server", resp, rpc.InvalidParams, "server a is stopped")
	if n := w.count("a", "started"); n != starts {
		t.Errorf("asking about a stopped server's task started it")
	}
	w.reloadTo(t, fmt.Sprintf(`{"a":%s}`, tasksServer(t, "")))
	_, resp = taskGet(t, agg, idB, withTasks)
	wantError(t, "a task of a removed server", resp, rpc.InvalidParams, "its server b was removed from the configuration")
}

// While a task works, its server's instance does not go dormant, and an
// operator's sleep is refused naming it; once an answer shows the task
// ended, the instance sleeps when idle again.
func TestWorkingTaskKeepsItsServerAwake(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, fmt.Sprintf(`{"a":%s}`, tasksServer(t, `,"idleTimeout":"1s","startGrace":"0s"`)))
	agg := w.gw.Aggregate()
	srv := w.fleet.Get("a")
	id := startTask(t, agg, "a__slow_compute")
	if !w.gw.Working(srv, "") {
		t.Fatal("a working task does not hold its instance")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := srv.Sleep(ctx); err == nil || !strings.Contains(err.Error(), "works on a task") {
		t.Fatalf("sleep with a task working: %v", err)
	}
	if resp := modernRequest(t, agg, "tasks/cancel", map[string]any{"taskId": id}, withTasks); resp.Error != nil {
		t.Fatal(resultOf(resp))
	}
	if w.gw.Working(srv, "") {
		t.Fatal("a cancelled task still holds its instance")
	}
	w.waitEvent("a", "dormant", 1, 10*time.Second)
	_, resp := taskGet(t, agg, id, withTasks)
	wantError(t, "a task of a dormant server", resp, rpc.InvalidParams, "server a is dormant")
	if n := w.count("a", "respawned"); n != 0 {
		t.Errorf("asking about a dormant server's task woke it")
	}
}

// everythingServer is the config of the reference server-everything (on
// the TypeScript SDK v1), which serves the 2025-11-25 revision's tasks.
func everythingServer(t *testing.T) string {
	return fmt.Sprintf(`{"command":"node","args":[%q,"stdio"]}`,
		filepath.Join(testserver.Deps(t, "npm"), "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"))
}

// 2025-11-25 tasks, through /mcp and the server's endpoint: a session's
// task gets mcpvisor's id in the result, in tasks/get, in tasks/result's
// related-task and in the status notifications, which reach that session
// alone; tasks/list lists a session's own tasks only; another session's
// id is refused; and /mcp offers the tasks capability of its server.
func TestLegacyTasksStayWithTheirSession(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	for _, c := range []struct {
		name, tool string
		agg        bool
	}{{"/mcp", "e__simulate-research-query", true}, {"e's endpoint", "simulate-research-query", false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// A world each: the holds of one's tasks are not the other's.
			w := newWorld(t, fmt.Sprintf(`{"e":%s}`, everythingServer(t)))
			ep := w.gw.Single("e")
			if c.agg {
				ep = w.gw.Aggregate()
			}
			outA, outB := newRecorder(), newRecorder()
			a := ep.Open(outA)
			defer ep.Close(a)
			init := ep.Handle(t.Context(), a, &rpc.Message{ID: json.RawMessage(`1`), Method: "initialize",
				Params: json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}`)}, newRecorder())
			if init == nil || init.Error != nil || !strings.Contains(string(init.Result), `"tasks":{`) {
				t.Fatalf("initialize: %s, want the tasks capability", resultOf(init))
			}
			b := openDeclaring(t, ep, outB, `{}`)
			defer ep.Close(b)
			call := func(s *Session, method string, params any) *rpc.Message {
				return ep.Handle(t.Context(), s, request(9, method, params), newRecorder())
			}
			resp := call(a, "tools/call", map[string]any{"name": c.tool, "arguments": map[string]any{"topic": "gateways"}, "task": map[string]any{"ttl": 60000}})
			var created struct {
				Task struct{ TaskID, Status string }
			}
			if resp.Error != nil || json.Unmarshal(resp.Result, &created) != nil || !strings.HasPrefix(created.Task.TaskID, taskIDPrefix) {
				t.Fatalf("tools/call with a task: %s", resultOf(resp))
			}
			id := created.Task.TaskID
			resp = call(a, "tasks/get", map[string]any{"taskId": id})
			if resp.Error != nil || rpc.Member(resp.Result, "taskId") == nil || !strings.Contains(string(resp.Result), id) {
				t.Errorf("tasks/get: %s", resultOf(resp))
			}
			wantError(t, "another session's task", call(b, "tasks/get", map[string]any{"taskId": id}), rpc.InvalidParams, "issued to another client session")
			wantError(t, "another session's task/result", call(b, "tasks/result", map[string]any{"taskId": id}), rpc.InvalidParams, "issued to another client session")
			wantError(t, "tasks/update in a 2025-11-25 session", call(a, "tasks/update", map[string]any{"taskId": id}), rpc.MethodNotFound, "not of this session's revision")
			list := func(s *Session) string {
				resp := call(s, "tasks/list", map[string]any{})
				if resp.Error != nil {
					t.Fatalf("tasks/list: %s", resultOf(resp))
				}
				return string(resp.Result)
			}
			if l := list(a); !strings.Contains(l, id) || strings.Count(l, `"taskId"`) != 1 {
				t.Errorf("a's tasks/list: %s, want its one task", l)
			}
			if l := list(b); l != `{"tasks":[]}` {
				t.Errorf("b's tasks/list: %s, want none", l)
			}
			wantError(t, "tasks/list with a cursor", call(a, "tasks/list", map[string]any{"cursor": "x"}), rpc.InvalidParams, "one page")
			// tasks/result waits for the end, and says which task it is.
			resp = call(a, "tasks/result", map[string]any{"taskId": id})
			if resp.Error != nil {
				t.Fatalf("tasks/result: %s", resultOf(resp))
			}
			related := rpc.Member(rpc.Member(resp.Result, "_meta"), relatedTaskKey)
			if got, _ := rpc.StringMember(related, "taskId"); got != id {
				t.Errorf("tasks/result's related task %s, want %s", related, id)
			}
			if w.gw.Working(w.fleet.Get("e"), "") {
				t.Errorf("a task whose result was read still holds its server")
			}
			for _, m := range sent(outA, "notifications/tasks/status") {
				if !strings.Contains(string(m.Params), id) {
					t.Errorf("a's status notification names another id: %s", m.Params)
				}
			}
			for _, m := range sent(outB, "notifications/tasks/status") {
				t.Errorf("b got a's task's status: %s", m.Params)
			}
			if len(sent(outA, "notifications/tasks/status")) == 0 {
				t.Errorf("a got none of its task's status notifications (server-everything sends one per stage)")
			}
		})
	}
}

// sent is what r was sent of method.
func sent(r *recorder, method string) []*rpc.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*rpc.Message
	for _, m := range r.msgs {
		if m.Method == method {
			out = append(out, m)
		}
	}
	return out
}

// A per-session server runs an instance of its own for each 2026-07-28
// request, which ends with it: the request is not offered tasks there, so
// the server answers the call itself, or says that it needs a task.
func TestPerSessionServerIsNotOfferedTasks(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, fmt.Sprintf(`{"a":%s}`, tasksServer(t, `,"sharing":"per-session"`)))
	for name, ep := range map[string]Endpoint{"/mcp": w.gw.Aggregate(), "a's endpoint": w.gw.Single("a")} {
		tool := "slow_compute"
		if name == "/mcp" {
			tool = "a__slow_compute"
		}
		resp := modernRequest(t, ep, "tools/call", map[string]any{"name": tool, "arguments": map[string]any{"seconds": 0}}, withTasks)
		if resp.Error != nil || strings.Contains(string(resp.Result), `"taskId"`) || !strings.Contains(string(resp.Result), "Result: 42") {
			t.Errorf("%s: slow_compute on a per-session server: %s, want its result, no task", name, resultOf(resp))
		}
		resp = modernRequest(t, ep, "tools/call", map[string]any{"name": strings.Replace(tool, "slow_compute", "failing_job", 1), "arguments": map[string]any{}}, withTasks)
		wantError(t, name+": a tool that needs a task, on a per-session server", resp, rpc.MissingClientCapability, "")
	}
}

// A 2025-11-25 server's request during a task (its elicitation, sent as
// the client reads tasks/result) reaches the client naming the task by
// mcpvisor's id, and the client's answer reaches the server.
func TestLegacyTaskInputNamesTheClientsID(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, fmt.Sprintf(`{"e":%s}`, everythingServer(t)))
	ep := w.gw.Aggregate()
	a := openDeclaring(t, ep, newRecorder(), `{"elicitation":{}}`)
	defer ep.Close(a)
	resp := ep.Handle(t.Context(), a, request(9, "tools/call", map[string]any{"name": "e__simulate-research-query",
		"arguments": map[string]any{"topic": "gateways", "ambiguous": true}, "task": map[string]any{"ttl": 60000}}), newRecorder())
	id, _ := rpc.StringMember(rpc.Member(resp.Result, "task"), "taskId")
	if !strings.HasPrefix(id, taskIDPrefix) {
		t.Fatalf("tools/call with a task: %s", resultOf(resp))
	}
	related := newRecorder()
	done := make(chan *rpc.Message, 1)
	go func() {
		done <- ep.Handle(t.Context(), a, request(10, "tasks/result", map[string]any{"taskId": id}), related)
	}()
	ask := related.next(t, "elicitation/create", 20*time.Second)
	rel := rpc.Member(rpc.Member(ask.Params, "_meta"), relatedTaskKey)
	if got, _ := rpc.StringMember(rel, "taskId"); got != id {
		t.Errorf("the elicitation names task %s, want %s", rel, id)
	}
	if r := ep.Handle(t.Context(), a, &rpc.Message{ID: ask.ID, Result: json.RawMessage(`{"action":"decline"}`)}, newRecorder()); r != nil {
		t.Fatalf("the answer: %s", resultOf(r))
	}
	select {
	case resp = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("tasks/result did not end after the elicitation was answered")
	}
	if resp.Error != nil || !strings.Contains(string(resp.Result), "declined") && !strings.Contains(string(resp.Result), "default") {
		t.Errorf("tasks/result: %s", resultOf(resp))
	}
}

// /mcp offers a 2026-07-28 client the tasks extension when one of its
// servers offers it, and only then; a legacy session is offered the
// 2025-11-25 tasks capability only by a server that has it (the
// extension is not of its revision).
func TestAggregateOffersTasksWhenAServerDoes(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	for _, c := range []struct {
		name, servers string
		modern        bool
	}{
		{"fixture alone", `{"x":{"command":"$FIXTURE"}}`, false},
		{"with a tasks server", fmt.Sprintf(`{"x":{"command":"$FIXTURE"},"a":%s}`, tasksServer(t, "")), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, c.servers)
			ep := w.gw.Aggregate()
			disc := modernRequest(t, ep, "server/discover", map[string]any{}, `{}`)
			if got := declaresExtension(rpc.Member(resultOrNil(disc), "capabilities"), tasksExtension); got != c.modern {
				t.Errorf("server/discover offers the tasks extension: %v, want %v (%s)", got, c.modern, resultOf(disc))
			}
			s := ep.Open(newRecorder())
			defer ep.Close(s)
			init := ep.Handle(t.Context(), s, &rpc.Message{ID: json.RawMessage(`1`), Method: "initialize",
				Params: json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}`)}, newRecorder())
			caps := rpc.Member(resultOrNil(init), "capabilities")
			if rpc.Member(caps, "tasks") != nil || rpc.Member(caps, "extensions") != nil {
				t.Errorf("a legacy session is offered %s", caps)
			}
		})
	}
}

func resultOrNil(m *rpc.Message) json.RawMessage {
	if m == nil {
		return nil
	}
	return m.Result
}

// legacyTasksServer is the config of the 2025-11-25 tasks fixture whose
// ids count from 1 in each process.
func legacyTasksServer(t *testing.T, extra string) string {
	return fmt.Sprintf(`{"command":"node","args":[%q]%s}`, testserver.LegacyTasksFixture(t), extra)
}

// legacyTask calls l's job with a task in session s, and returns the id.
func legacyTask(t *testing.T, ep Endpoint, s *Session, args map[string]any) string {
	t.Helper()
	resp := ep.Handle(t.Context(), s, request(3, "tools/call", map[string]any{"name": "l__job", "arguments": args, "task": map[string]any{"ttl": 60000}}), newRecorder())
	id, _ := rpc.StringMember(rpc.Member(resultOrNil(resp), "task"), "taskId")
	if !strings.HasPrefix(id, taskIDPrefix) {
		t.Fatalf("l__job with a task: %s", resultOf(resp))
	}
	return id
}

// A server's request about a task (input it asks for on its own, later)
// goes to the session the task was given to, never to another session
// that happens to have a call in flight there, nor to a 2026-07-28
// request's call; with no request of its session in flight there, the
// server is told so.
func TestTaskInputReachesOnlyItsSession(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, fmt.Sprintf(`{"l":%s}`, legacyTasksServer(t, "")))
	ep := w.gw.Aggregate()
	outA, outB := newRecorder(), newRecorder()
	a := openDeclaring(t, ep, outA, `{"elicitation":{}}`)
	b := openDeclaring(t, ep, outB, `{"elicitation":{}}`)
	defer ep.Close(a)
	defer ep.Close(b)
	// A's task asks 300 ms later, while B's call (and then a modern
	// request's) is the only one in flight on the server.
	legacyTask(t, ep, a, map[string]any{"elicitLater": 300})
	relB := newRecorder()
	resp := ep.Handle(t.Context(), b, request(4, "tools/call", map[string]any{"name": "l__slow", "arguments": map[string]any{"ms": 1200}}), relB)
	if resp.Error != nil {
		t.Fatalf("b's call: %s", resultOf(resp))
	}
	legacyTask(t, ep, a, map[string]any{"elicitLater": 300})
	modern := modernRequest(t, ep, "tools/call", map[string]any{"name": "l__slow", "arguments": map[string]any{"ms": 1200}}, `{"elicitation":{}}`)
	if modern.Error != nil || strings.Contains(string(modern.Result), "private question") || strings.Contains(string(modern.Result), "input_required") {
		t.Errorf("the modern call got a's task's question: %s", resultOf(modern))
	}
	for _, r := range []*recorder{relB, outB} {
		if n := len(sent(r, "elicitation/create")); n != 0 {
			t.Errorf("b was asked a's task's question %d times", n)
		}
	}
	if n := len(sent(outA, "elicitation/create")); n != 0 {
		t.Errorf("a was asked with no request of its in flight: %d", n)
	}
}

// After a restart the server's new process reuses its ids: the status of
// another session's new task "1" does not reach the session that had the
// old "1" (nor, sent before the task was created, anyone), and that
// session's tasks/list does not show it; the old task's hold went with
// its process.
func TestReusedServerIDsAfterARestartStayApart(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, fmt.Sprintf(`{"l":%s}`, legacyTasksServer(t, "")))
	ep := w.gw.Aggregate()
	outA, outB := newRecorder(), newRecorder()
	a := openDeclaring(t, ep, outA, `{}`)
	b := openDeclaring(t, ep, outB, `{}`)
	defer ep.Close(a)
	defer ep.Close(b)
	idA := legacyTask(t, ep, a, nil)
	srv := w.fleet.Get("l")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if w.gw.Working(srv, "") {
		t.Errorf("a task of the process a restart ended still holds the new one awake")
	}
	before := len(sent(outA, "notifications/tasks/status"))
	// The fixture notifies the new "1"'s status before the result that
	// creates it (read in order: handled by the time the result is).
	legacyTask(t, ep, b, nil)
	if n := len(sent(outA, "notifications/tasks/status")); n != before {
		t.Errorf("a got %d status notifications of b's task", n-before)
	}
	resp := ep.Handle(t.Context(), a, request(5, "tasks/list", map[string]any{}), newRecorder())
	if l := string(resultOrNil(resp)); l != `{"tasks":[]}` {
		t.Errorf("a's tasks/list after the restart: %s (a's id %s), want none", resultOf(resp), idA)
	}
}

// A 2026-07-28 request's 2025-11-25 task request (params.task), which its
// revision ignores, does not reach a legacy server: the call is answered
// as a call, with no task the client could not follow.
func TestModernRequestsLegacyTaskParamIsDropped(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, fmt.Sprintf(`{"l":%s}`, legacyTasksServer(t, "")))
	for _, caps := range []string{withTasks, `{"elicitation":{},"extensions":{"io.modelcontextprotocol/tasks":{}}}`} {
		resp := modernRequest(t, w.gw.Aggregate(), "tools/call", map[string]any{"name": "l__job", "task": map[string]any{"ttl": 60000}}, caps)
		if resp.Error != nil || !strings.Contains(string(resp.Result), "sync job") || strings.Contains(string(resp.Result), "taskId") {
			t.Errorf("caps %s: %s, want the call's own answer", caps, resultOf(resp))
		}
	}
	if w.gw.Working(w.fleet.Get("l"), "") {
		t.Errorf("a task was made")
	}
}

// tasks/list neither wakes a dormant server nor asks about tasks whose
// process is gone; a legacy session's id is refused to a 2026-07-28
// request; and a task's hold ends with its session.
func TestLegacyTaskHoldsAndListWakeNothing(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, fmt.Sprintf(`{"l":%s}`, legacyTasksServer(t, `,"idleTimeout":"1s","startGrace":"0s"`)))
	ep := w.gw.Aggregate()
	srv := w.fleet.Get("l")
	a := openDeclaring(t, ep, newRecorder(), `{}`)
	id := legacyTask(t, ep, a, nil)
	_, resp := taskGet(t, ep, id, withTasks)
	wantError(t, "a legacy session's task asked by a 2026-07-28 request", resp, rpc.InvalidParams, "issued to a client session")
	if !w.gw.Working(srv, "") {
		t.Fatal("a working task does not hold its server")
	}
	ep.Close(a) // its tasks go with it
	if w.gw.Working(srv, "") {
		t.Fatal("a closed session's task still holds its server")
	}
	w.waitEvent("l", "dormant", 1, 10*time.Second)
	b := openDeclaring(t, ep, newRecorder(), `{}`)
	defer ep.Close(b)
	w.waitEvent("l", "started", 1, time.Second)
	id = legacyTask(t, ep, b, nil) // wakes it: a call
	if r := ep.Handle(t.Context(), b, request(4, "tasks/cancel", map[string]any{"taskId": id}), newRecorder()); r.Error != nil {
		t.Fatal(resultOf(r))
	}
	w.waitEvent("l", "dormant", 2, 10*time.Second)
	wakes := w.count("l", "respawned")
	resp = ep.Handle(t.Context(), b, request(5, "tasks/list", map[string]any{}), newRecorder())
	if l := string(resultOrNil(resp)); l != `{"tasks":[]}` {
		t.Errorf("tasks/list of a dormant server's tasks: %s, want none", resultOf(resp))
	}
	if n := w.count("l", "respawned"); n != wakes {
		t.Errorf("tasks/list woke the server")
	}
}

// The book's holds: a task holds its instance until an answer shows it
// ended (a terminal tasks/get), and, however long its ttl, not past it.
func TestTaskHoldEndsWithTheTaskOrItsTTL(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, fmt.Sprintf(`{"a":%s}`, tasksServer(t, "")))
	agg, srv := w.gw.Aggregate(), w.fleet.Get("a")
	resp := modernRequest(t, agg, "tools/call", map[string]any{"name": "a__slow_compute", "arguments": map[string]any{"seconds": 1}}, withTasks)
	id, _ := rpc.StringMember(resp.Result, "taskId")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if st, resp := taskGet(t, agg, id, withTasks); st == "completed" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("not completed: %s", resultOf(resp))
		}
		if !w.gw.Working(srv, "") {
			t.Fatal("the task stopped holding its server before it ended")
		}
	}
	if w.gw.Working(srv, "") {
		t.Fatal("a completed task still holds its server")
	}
	// A ttl: the hold goes when it runs out.
	e := &taskEntry{id: "x", srv: srv, working: true}
	w.gw.tasks.add(w.gw, e, 50*time.Millisecond)
	if !w.gw.Working(srv, "") {
		t.Fatal("the recorded task does not hold its server")
	}
	for deadline := time.Now().Add(5 * time.Second); w.gw.Working(srv, ""); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the hold outlived its ttl")
		}
	}
	if d := ttlOf(json.RawMessage(`86400000`)); d != taskHoldMax {
		t.Errorf("a day's ttl holds for %v, want at most %v", d, taskHoldMax)
	}
	if d := ttlOf(json.RawMessage(`null`)); d != taskHoldMax {
		t.Errorf("no ttl holds for %v, want %v", d, taskHoldMax)
	}
}

// A task's question goes to its session's tasks/result of that task, not
// to a newer request of the same session on the server.
func TestTaskInputGoesToItsTasksResult(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, fmt.Sprintf(`{"l":%s}`, legacyTasksServer(t, "")))
	ep := w.gw.Aggregate()
	a := openDeclaring(t, ep, newRecorder(), `{"elicitation":{}}`)
	defer ep.Close(a)
	id := legacyTask(t, ep, a, map[string]any{"elicitLater": 800, "endAfter": 1500})
	l, ok := w.fleet.Get("l").Peek("")
	if !ok {
		t.Fatal("l does not run")
	}
	conn := l.Conn()
	l.Release()
	result, slow := newRecorder(), newRecorder()
	done := make(chan *rpc.Message, 2)
	go func() {
		done <- ep.Handle(t.Context(), a, request(10, "tasks/result", map[string]any{"taskId": id}), result)
	}()
	for deadline := time.Now().Add(5 * time.Second); w.gw.reg.newestCallOf(conn, a) == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("tasks/result never reached the server")
		}
	}
	go func() {
		done <- ep.Handle(t.Context(), a, request(11, "tools/call", map[string]any{"name": "l__slow", "arguments": map[string]any{"ms": 1500}}), slow)
	}()
	ask := result.next(t, "elicitation/create", 10*time.Second)
	if got, _ := rpc.StringMember(rpc.Member(rpc.Member(ask.Params, "_meta"), relatedTaskKey), "taskId"); got != id {
		t.Errorf("the question names %q, want %s", got, id)
	}
	for range 2 {
		if r := <-done; r.Error != nil {
			t.Errorf("%s", resultOf(r))
		}
	}
	if n := len(sent(slow, "elicitation/create")); n != 0 {
		t.Errorf("the newer call was asked the task's question")
	}
}

// A task's request that reaches the server after its process changed
// (a restart between the id's check and the send) is not sent to the new
// process, which may know another client's task by the same id.
func TestTaskRequestGoesOnlyToItsProcess(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, fmt.Sprintf(`{"l":%s}`, legacyTasksServer(t, "")))
	ep := w.gw.Aggregate()
	a := openDeclaring(t, ep, newRecorder(), `{}`)
	defer ep.Close(a)
	legacyTask(t, ep, a, nil) // the server runs, with a task "1"
	srv := w.fleet.Get("l")
	run, _, _ := srv.Runs("")
	for _, c := range []struct {
		run  uint64
		fail bool
	}{{run, false}, {run + 1000, true}} {
		ctx := context.WithValue(t.Context(), taskRunKey{}, c.run)
		resp := w.gw.forward(ctx, legacySender(a), srv, "tasks/get", json.RawMessage(`{"taskId":"1"}`), json.RawMessage(`21`), newRecorder())
		if c.fail {
			wantError(t, "a task's request for another process", resp, rpc.InvalidParams, "has restarted since")
		} else if resp.Error != nil {
			t.Errorf("a task's request for its process: %s", resultOf(resp))
		}
	}
}

// A per-session server's task holds that session's own instance, and no
// other (the shared one, another session's); it ends with the session.
func TestPerSessionTaskHoldsItsOwnInstance(t *testing.T) {
	t.Parallel() // its own world: no state shared with other tests
	w := newWorld(t, fmt.Sprintf(`{"l":%s}`, legacyTasksServer(t, `,"sharing":"per-session"`)))
	ep := w.gw.Aggregate()
	srv := w.fleet.Get("l")
	a := openDeclaring(t, ep, newRecorder(), `{}`)
	b := openDeclaring(t, ep, newRecorder(), `{}`)
	defer ep.Close(b)
	id := legacyTask(t, ep, a, nil)
	if !w.gw.Working(srv, a.Key()) {
		t.Fatal("a's task does not hold a's own instance")
	}
	if w.gw.Working(srv, "") || w.gw.Working(srv, b.Key()) {
		t.Error("a's task holds an instance that is not a's")
	}
	resp := ep.Handle(t.Context(), b, request(5, "tasks/get", map[string]any{"taskId": id}), newRecorder())
	wantError(t, "a's task asked in b", resp, rpc.InvalidParams, "issued to another client session")
	ep.Close(a)
	if w.gw.Working(srv, a.Key()) {
		t.Error("a's task still holds its instance after a closed")
	}
}

package gateway

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// Tasks: a tools/call a server answers with a task (the 2026-07-28 tasks
// extension, SEP-2663: a result of resultType "task" with a taskId; the
// 2025-11-25 revision's experimental tasks: a result {"task": {...}})
// goes on after its request ended, and the client follows it with
// tasks/get (tasks/update, tasks/cancel; 2025-11-25: tasks/result,
// tasks/list).
//
// A task id a client gets from mcpvisor is mcpvisor's: it carries the
// server, the run of the server's process that holds the task (Lease.Run),
// the session it was given to (a legacy session's; none for a 2026-07-28
// request, which has no session) and the server's own id, signed with
// the gateway's key (the one requestState is signed with). So tasks/*
// route by the id alone, on either endpoint, with nothing stored; an id
// mcpvisor did not issue, or issued to another session or for another
// server's endpoint, reaches no server; and one whose process is gone —
// the server slept, restarted, crashed, or a reload removed it — is
// answered at once, naming why, without starting anything.
//
// A server keeps a task only in its process, so while a task works, its
// instance does not go dormant (taskBook, fleet.TaskHolder): until a
// tasks/get or tasks/cancel answer shows it ended, or its ttl runs out,
// at most taskHoldMax.

// tasksExtension is the tasks extension's identifier (SEP-2663), which
// 2026-07-28 servers and clients negotiate.
const tasksExtension = "io.modelcontextprotocol/tasks"

// taskIDPrefix begins every task id mcpvisor issues.
const taskIDPrefix = "mcpv-t1."

// taskHoldMax bounds how long a task keeps its server's instance awake
// when nothing says it ended: a task with no ttl, or a longer one, that
// no client asks about any more.
const taskHoldMax = time.Hour

// maxTaskEntries bounds the tasks the book records; more tasks still work
// and route, but do not keep their servers awake (a warning says so).
const maxTaskEntries = 10_000

// taskRef is what a task id mcpvisor issued says.
type taskRef struct {
	Server string `json:"s"`
	Bind   string `json:"b,omitempty"` // the session's binding (bindOf); "" for a 2026-07-28 request
	Run    uint64 `json:"r,omitempty"` // the run that holds it (Lease.Run); 0: not checked (a remote server)
	Up     string `json:"u"`           // the server's own id
}

// taskID is the id a client gets for ref.
func (g *Gateway) taskID(ref taskRef) string {
	body := mustJSON(ref)
	enc := base64.RawURLEncoding.EncodeToString(body)
	return taskIDPrefix + enc + "." + base64.RawURLEncoding.EncodeToString(g.taskMAC(enc))
}

func (g *Gateway) taskMAC(enc string) []byte {
	mac := hmac.New(sha256.New, g.stateKey)
	mac.Write([]byte("task\x00"))
	mac.Write([]byte(enc))
	return mac.Sum(nil)[:16]
}

// parseTaskID is what id says, if mcpvisor issued it.
func (g *Gateway) parseTaskID(id string) (taskRef, bool) {
	rest, ok := strings.CutPrefix(id, taskIDPrefix)
	if !ok {
		return taskRef{}, false
	}
	enc, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return taskRef{}, false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, g.taskMAC(enc)) {
		return taskRef{}, false
	}
	body, err := base64.RawURLEncoding.DecodeString(enc)
	var ref taskRef
	if err != nil || json.Unmarshal(body, &ref) != nil || ref.Server == "" || ref.Up == "" {
		return taskRef{}, false
	}
	return ref, true
}

// bindOf is the binding of w's tasks: its legacy session's (a digest of
// the session's key, which the id should not show), "" for a 2026-07-28
// request.
func (g *Gateway) bindOf(w sender) string {
	if w.sess == nil {
		return ""
	}
	mac := hmac.New(sha256.New, g.stateKey)
	mac.Write([]byte("session\x00"))
	mac.Write([]byte(w.sess.Key()))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:12])
}

// taskIDKey is in every result that creates a task, in either era.
var taskIDKey = []byte(`"taskId"`)

// taskCreated is resp, the answer of srv to w's tools/call, with the task
// it creates, if any, given mcpvisor's id (and recorded: the book holds
// the server awake while it works).
func (g *Gateway) taskCreated(w sender, srv *fleet.Server, resp *rpc.Message) *rpc.Message {
	res := resp.Result
	var up string
	var ttl json.RawMessage
	modern := false
	if rt, _ := rpc.StringMember(res, "resultType"); rt == "task" {
		modern = true
		up, _ = rpc.StringMember(res, "taskId")
		ttl = rpc.Member(res, "ttlMs")
	} else if task := rpc.Member(res, "task"); len(task) > 0 && task[0] == '{' {
		up, _ = rpc.StringMember(task, "taskId")
		ttl = rpc.Member(task, "ttl")
	}
	if up == "" {
		return resp
	}
	key := w.key()
	if !srv.Config().PerSession() {
		key = ""
	}
	run, _ := srv.Run(key, w.req != nil)
	ref := taskRef{Server: srv.Name(), Bind: g.bindOf(w), Run: run, Up: up}
	id := g.taskID(ref)
	out := *resp
	if modern {
		out.Result, _ = rpc.ReplaceMember(res, "taskId", mustJSON(id))
	} else {
		task, _ := rpc.ReplaceMember(rpc.Member(res, "task"), "taskId", mustJSON(id))
		out.Result, _ = rpc.ReplaceMember(res, "task", task)
	}
	var session string
	if w.sess != nil {
		session = w.sess.Key()
	}
	g.tasks.add(g, &taskEntry{id: id, srv: srv, key: key, session: session, up: up, working: true}, ttlOf(ttl))
	return &out
}

// ttlOf is how long a task whose ttl (ms, or null) is raw keeps its
// server awake: its ttl, at most taskHoldMax.
func ttlOf(raw json.RawMessage) time.Duration {
	var ms float64
	if json.Unmarshal(raw, &ms) != nil || ms <= 0 {
		return taskHoldMax
	}
	return min(time.Duration(ms*float64(time.Millisecond)), taskHoldMax)
}

// taskRequest serves a tasks method from w on an endpoint: only (the
// per-server endpoint's server) or any server (nil: /mcp).
func (g *Gateway) taskRequest(ctx context.Context, w sender, m *rpc.Message, related Sink, only *fleet.Server) *rpc.Message {
	modern := w.req != nil
	switch {
	case modern && (m.Method == "tasks/result" || m.Method == "tasks/list"):
		return errorResponse(m.ID, rpc.MethodNotFound, "method not found: "+m.Method+" is not part of MCP "+modernVersion+
			" (its tasks extension has tasks/get, tasks/update and tasks/cancel)")
	case !modern && m.Method == "tasks/update":
		return errorResponse(m.ID, rpc.MethodNotFound, "method not found: tasks/update is part of the tasks extension of MCP "+modernVersion+", not of this session's revision")
	case modern && !declaresExtension(w.req.mo.Caps, tasksExtension):
		// Before the id is read: the extension is what a request must
		// declare to use any of its methods.
		data := mustJSON(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{tasksExtension: map[string]any{}}}})
		return &rpc.Message{ID: m.ID, Error: &rpc.Error{Code: rpc.MissingClientCapability,
			Message: m.Method + " needs the " + tasksExtension + " extension, which the request did not declare in its client capabilities", Data: data}}
	case m.Method == "tasks/list":
		return g.taskList(ctx, w, m, related, only)
	}
	id, _ := rpc.StringMember(m.Params, "taskId")
	if id == "" {
		return errorResponse(m.ID, rpc.InvalidParams, m.Method+": params.taskId (a string) is required")
	}
	srv, ref, resp := g.taskTarget(w, m, id, only)
	if resp != nil {
		return resp
	}
	params, _ := rpc.ReplaceMember(m.Params, "taskId", mustJSON(ref.Up))
	resp = g.forward(ctx, w, srv, m.Method, params, m.ID, related)
	return g.taskAnswered(m.Method, id, ref, resp)
}

// taskTarget is the server of task id, which w's request m names, and
// what the id says; or the answer when it names none that w may reach.
func (g *Gateway) taskTarget(w sender, m *rpc.Message, id string, only *fleet.Server) (*fleet.Server, taskRef, *rpc.Message) {
	notFound := func(why string) (*fleet.Server, taskRef, *rpc.Message) {
		return nil, taskRef{}, errorResponse(m.ID, rpc.InvalidParams, m.Method+": task "+id+" "+why)
	}
	ref, ok := g.parseTaskID(id)
	if !ok {
		return notFound("not found: not a task id mcpvisor issued (ids from before mcpvisor restarted are no longer valid)")
	}
	if ref.Bind != g.bindOf(w) {
		switch {
		case w.sess == nil:
			return notFound("not found: it was issued to a client session, and only that session may use it")
		case ref.Bind == "":
			return notFound("not found: it was issued to a " + modernVersion + " request, which has no session: only such requests may use it")
		}
		return notFound("not found: it was issued to another client session, and only that session may use it")
	}
	srv := only
	switch {
	case only != nil && only.Name() != ref.Server:
		return notFound("not found: it is a task of server " + ref.Server + ", not of this endpoint's server " + only.Name() + " (use /mcp or /servers/" + ref.Server + "/mcp)")
	case only == nil:
		srv = g.fleet.Get(ref.Server)
	}
	if srv == nil || srv.Removed() {
		return notFound("is gone: its server " + ref.Server + " was removed from the configuration, and its tasks with it")
	}
	if ref.Run != 0 {
		key := w.key()
		if !srv.Config().PerSession() {
			key = ""
		}
		run, running := srv.Run(key, w.req != nil)
		switch {
		case !running:
			return notFound(fmt.Sprintf("is gone: server %s is %s, and a task lives only in the process that was working on it", ref.Server, srv.Status().State))
		case run != ref.Run:
			return notFound("is gone: server " + ref.Server + " has restarted since (a new process), and a task lives only in the process that was working on it")
		}
	}
	return srv, ref, nil
}

// taskAnswered is resp, a server's answer to tasks method about the task
// the client knows as id, with the client's id where the server put its
// own; a task that ended no longer keeps its server awake.
func (g *Gateway) taskAnswered(method, id string, ref taskRef, resp *rpc.Message) *rpc.Message {
	if resp.Error != nil {
		if resp.Error.Code == rpc.InvalidParams && method != "tasks/update" {
			g.tasks.ended(id) // the server no longer knows it
		}
		return resp
	}
	res := resp.Result
	if len(res) == 0 || res[0] != '{' {
		return resp
	}
	out := *resp
	if up, _ := rpc.StringMember(res, "taskId"); up == ref.Up {
		res, _ = rpc.ReplaceMember(res, "taskId", mustJSON(id))
	}
	if meta := rpc.Member(res, "_meta"); bytes.Contains(meta, []byte(relatedTaskKey)) {
		if rel := rpc.Member(meta, relatedTaskKey); len(rel) > 0 {
			if up, _ := rpc.StringMember(rel, "taskId"); up == ref.Up {
				rel, _ = rpc.ReplaceMember(rel, "taskId", mustJSON(id))
				meta, _ = rpc.ReplaceMember(meta, relatedTaskKey, rel)
				res, _ = rpc.ReplaceMember(res, "_meta", meta)
			}
		}
	}
	out.Result = res
	switch method {
	case "tasks/cancel", "tasks/result":
		g.tasks.ended(id)
	case "tasks/get":
		if st, _ := rpc.StringMember(res, "status"); terminalStatus(st) {
			g.tasks.ended(id)
		}
	}
	return &out
}

// relatedTaskKey is the _meta key that ties a 2025-11-25 message to its
// task.
const relatedTaskKey = "io.modelcontextprotocol/related-task"

// terminalStatus reports whether a task in status st has ended.
func terminalStatus(st string) bool {
	return st == "completed" || st == "failed" || st == "cancelled"
}

// declaresExtension reports whether client capabilities caps declare the
// extension id.
func declaresExtension(caps json.RawMessage, id string) bool {
	ext := rpc.Member(rpc.Member(caps, "extensions"), id)
	return len(ext) > 0 && ext[0] == '{'
}

// taskList answers a legacy session's tasks/list: the tasks it created
// that the book still records, as their servers list them now, in one
// page.
func (g *Gateway) taskList(ctx context.Context, w sender, m *rpc.Message, related Sink, only *fleet.Server) *rpc.Message {
	if c, _ := rpc.StringMember(m.Params, "cursor"); c != "" {
		return errorResponse(m.ID, rpc.InvalidParams, "tasks/list: invalid cursor: mcpvisor lists every task of the session in one page")
	}
	mine := g.tasks.ofSession(w.sess.Key(), only)
	tasks := []json.RawMessage{}
	for srv, ups := range mine {
		cursor := ""
		for range maxTaskPages {
			params := json.RawMessage(`{}`)
			if cursor != "" {
				params = mustJSON(map[string]string{"cursor": cursor})
			}
			resp := g.forward(ctx, w, srv, "tasks/list", params, m.ID, related)
			if resp.Error != nil {
				g.log.Debug("tasks/list: a server's tasks left out", "server", srv.Name(), "err", resp.Error.Message)
				break
			}
			var page struct {
				Tasks      []json.RawMessage `json:"tasks"`
				NextCursor string            `json:"nextCursor"`
			}
			if json.Unmarshal(resp.Result, &page) != nil {
				break
			}
			for _, t := range page.Tasks {
				up, _ := rpc.StringMember(t, "taskId")
				if id, ok := ups[up]; ok {
					t, _ = rpc.ReplaceMember(t, "taskId", mustJSON(id))
					tasks = append(tasks, t)
				}
			}
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
	}
	return resultResponse(m.ID, mustJSON(map[string]any{"tasks": tasks}))
}

// maxTaskPages bounds the pages of one server's tasks/list read for one
// client's.
const maxTaskPages = 20

// tasksCaps adds to caps (and ext, the extensions) what the aggregated
// endpoint offers of tasks, from the servers' initialize results: to a
// 2026-07-28 client the extension when a server offers it; to a legacy
// session the 2025-11-25 tasks capability, the union of the servers'.
func tasksCaps(inits []*fleet.InitResult, modern bool, caps, ext map[string]json.RawMessage) {
	if modern {
		for _, in := range inits {
			if serverExtension(in, tasksExtension) != nil {
				ext[tasksExtension] = json.RawMessage(`{}`)
				return
			}
		}
		return
	}
	var list, cancel, call bool
	for _, in := range inits {
		t := serverCaps(in)["tasks"]
		if len(t) == 0 || t[0] != '{' {
			continue
		}
		list = list || rpc.Member(t, "list") != nil
		cancel = cancel || rpc.Member(t, "cancel") != nil
		call = call || rpc.Member(rpc.Member(rpc.Member(t, "requests"), "tools"), "call") != nil
	}
	if !list && !cancel && !call {
		return
	}
	out := map[string]any{}
	if list {
		out["list"] = struct{}{}
	}
	if cancel {
		out["cancel"] = struct{}{}
	}
	if call {
		out["requests"] = map[string]any{"tools": map[string]any{"call": struct{}{}}}
	}
	caps["tasks"] = mustJSON(out)
}

// taskEntry is a task the book records.
type taskEntry struct {
	id      string // the client's id (mcpvisor's)
	srv     *fleet.Server
	key     string // its instance's key: "" for the shared one
	session string // the legacy session it was given to; "" for a 2026-07-28 request
	up      string // the server's id
	working bool   // it keeps its instance awake
	timer   *time.Timer
}

// instKey names an instance.
type instKey struct {
	srv *fleet.Server
	key string
}

// taskBook is the tasks mcpvisor gave ids to, until they end or their
// time does (ttlOf): which keep their instances awake (Working), which a
// legacy session lists, and where a 2025-11-25 server's status
// notification goes. Its methods are the only code that touches it.
type taskBook struct {
	mu      sync.Mutex
	byID    map[string]*taskEntry
	byUp    map[instKey]map[string]*taskEntry // by instance, then the server's id
	working map[instKey]int
	warned  bool
}

// add records e for d, and holds its instance awake meanwhile.
func (b *taskBook) add(g *Gateway, e *taskEntry, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.byID) >= maxTaskEntries {
		if !b.warned {
			b.warned = true
			g.log.Warn("tasks: too many recorded; newer tasks work, but do not keep their servers awake", "recorded", len(b.byID))
		}
		return
	}
	if b.byID == nil {
		b.byID, b.byUp, b.working = map[string]*taskEntry{}, map[instKey]map[string]*taskEntry{}, map[instKey]int{}
	}
	if old := b.byID[e.id]; old != nil {
		b.dropLocked(old) // the same task again (a retried call's answer)
	}
	ik := instKey{e.srv, e.key}
	b.byID[e.id] = e
	if b.byUp[ik] == nil {
		b.byUp[ik] = map[string]*taskEntry{}
	}
	b.byUp[ik][e.up] = e
	b.working[ik]++
	e.timer = time.AfterFunc(d, func() { b.expire(e) })
}

// expire forgets e, whose time is up.
func (b *taskBook) expire(e *taskEntry) {
	b.mu.Lock()
	rearm := b.byID[e.id] == e && b.dropLocked(e)
	b.mu.Unlock()
	if rearm {
		e.srv.Rearm(e.key)
	}
}

// dropLocked forgets e; it reports whether e held its instance awake.
func (b *taskBook) dropLocked(e *taskEntry) (wasWorking bool) {
	e.timer.Stop()
	delete(b.byID, e.id)
	ik := instKey{e.srv, e.key}
	if m := b.byUp[ik]; m[e.up] == e {
		delete(m, e.up)
		if len(m) == 0 {
			delete(b.byUp, ik)
		}
	}
	return b.idleLocked(e)
}

// idleLocked makes e hold its instance no longer; it reports whether it
// did.
func (b *taskBook) idleLocked(e *taskEntry) bool {
	if !e.working {
		return false
	}
	e.working = false
	ik := instKey{e.srv, e.key}
	if b.working[ik]--; b.working[ik] <= 0 {
		delete(b.working, ik)
	}
	return true
}

// ended tells the book that the task id has ended (or its server no
// longer knows it): it no longer holds its instance awake. A legacy
// session's stays recorded, for its tasks/list, until its time is up.
func (b *taskBook) ended(id string) {
	b.mu.Lock()
	e := b.byID[id]
	rearm := false
	if e != nil {
		if e.session == "" {
			rearm = b.dropLocked(e)
		} else {
			rearm = b.idleLocked(e)
		}
	}
	b.mu.Unlock()
	if rearm {
		e.srv.Rearm(e.key)
	}
}

// endSession forgets the tasks of the ended session: nobody may ask
// about them any more.
func (b *taskBook) endSession(session string) {
	b.mu.Lock()
	var rearm []*taskEntry
	for _, e := range b.byID {
		if e.session == session && b.dropLocked(e) {
			rearm = append(rearm, e)
		}
	}
	b.mu.Unlock()
	for _, e := range rearm {
		e.srv.Rearm(e.key)
	}
}

// Working reports whether the instance keyed key of s works on a task
// a client follows (fleet.TaskHolder).
func (b *taskBook) Working(s *fleet.Server, key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.working[instKey{s, key}] > 0
}

// ofSession is the tasks the session was given, by server (only's, when
// set), each the server's id → the client's.
func (b *taskBook) ofSession(session string, only *fleet.Server) map[*fleet.Server]map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[*fleet.Server]map[string]string{}
	for _, e := range b.byID {
		if e.session != session || only != nil && e.srv != only {
			continue
		}
		if out[e.srv] == nil {
			out[e.srv] = map[string]string{}
		}
		out[e.srv][e.up] = e.id
	}
	return out
}

// byServerID is the task the instance keyed key of s knows as up, if
// recorded: its client's id and session.
func (b *taskBook) byServerID(s *fleet.Server, key, up string) (id, session string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.byUp[instKey{s, key}][up]
	if e == nil {
		return "", "", false
	}
	return e.id, e.session, true
}

// withoutExtension is params, a modern request's, with the extension id
// left out of its client capabilities.
func withoutExtension(params json.RawMessage, id string) json.RawMessage {
	meta := rpc.Member(params, "_meta")
	caps := rpc.Member(meta, metaClientCaps)
	var ext map[string]json.RawMessage
	if json.Unmarshal(rpc.Member(caps, "extensions"), &ext) != nil {
		return params
	}
	delete(ext, id)
	caps, _ = rpc.ReplaceMember(caps, "extensions", mustJSON(ext))
	meta, _ = rpc.ReplaceMember(meta, metaClientCaps, caps)
	params, _ = rpc.ReplaceMember(params, "_meta", meta)
	return params
}

// taskStatus relays a 2025-11-25 server's notifications/tasks/status to
// the session the task was given to, with the id it knows; a task mcpvisor
// did not give out, or a session's that ended, is no one's.
func (g *Gateway) taskStatus(src fleet.Source, m *rpc.Message) {
	up, _ := rpc.StringMember(m.Params, "taskId")
	key := src.Session
	if !src.Server.Config().PerSession() {
		key = ""
	}
	id, session, ok := g.tasks.byServerID(src.Server, key, up)
	if !ok || session == "" {
		return
	}
	s := g.reg.sessionByKey(session)
	if s == nil {
		return
	}
	params, _ := rpc.ReplaceMember(m.Params, "taskId", mustJSON(id))
	if st, _ := rpc.StringMember(m.Params, "status"); terminalStatus(st) {
		g.tasks.ended(id)
	}
	_ = s.Out().Send(&rpc.Message{Method: m.Method, Params: params})
}

// relatedTaskOut is params, those of a 2025-11-25 server's request (on
// conn) to session s, with the task it says it relates to given the id s
// knows it by; a task that is not s's is left out, so that no server's
// own id reaches a client.
func (g *Gateway) relatedTaskOut(conn fleet.Conn, s *Session, params json.RawMessage) json.RawMessage {
	meta := rpc.Member(params, "_meta")
	if !bytes.Contains(meta, []byte(relatedTaskKey)) {
		return params
	}
	rel := rpc.Member(meta, relatedTaskKey)
	if rel == nil {
		return params
	}
	up, _ := rpc.StringMember(rel, "taskId")
	var id, session string
	if srv := g.fleet.Get(conn.Name()); srv != nil {
		key := ""
		if srv.Config().PerSession() {
			key = s.Key()
		}
		id, session, _ = g.tasks.byServerID(srv, key, up)
	}
	if id == "" || session != s.Key() {
		return rpc.DropMembers(params, nil, []string{relatedTaskKey})
	}
	rel, _ = rpc.ReplaceMember(rel, "taskId", mustJSON(id))
	meta, _ = rpc.ReplaceMember(meta, relatedTaskKey, rel)
	params, _ = rpc.ReplaceMember(params, "_meta", meta)
	return params
}

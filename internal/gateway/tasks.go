package gateway

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
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

// maxTaskEntries bounds the tasks the book records, maxSessionTasks those
// of one legacy session (whose ended tasks stay recorded for its
// tasks/list): more tasks still work and route, but do not keep their
// servers awake, are not listed and get no status notifications (a
// warning says so).
const (
	maxTaskEntries  = 10_000
	maxSessionTasks = 1_000
)

// taskRef is what a task id mcpvisor issued says.
type taskRef struct {
	Server string `json:"s"`
	Bind   string `json:"b,omitempty"` // the session's binding (bindOf); "" for a 2026-07-28 request
	Run    uint64 `json:"r,omitempty"` // the run that holds it (fleet.ConnRun); 0: not checked (a remote server)
	Origin string `json:"o,omitempty"` // a remote server's: its URL's digest (originOf)
	Up     string `json:"u"`           // the server's own id
}

// taskID is the id a client gets for ref: ref sealed (AES-GCM, with a key
// derived from the gateway's), so that a client can neither read the
// server's own id in it nor change anything it says.
func (g *Gateway) taskID(ref taskRef) string {
	aead := g.taskAEAD()
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	return g.stamp(taskIDPrefix + base64.RawURLEncoding.EncodeToString(aead.Seal(nonce, nonce, mustJSON(ref), []byte(taskIDPrefix))))
}

// taskAEAD is the cipher task ids are sealed with.
func (g *Gateway) taskAEAD() cipher.AEAD {
	g.taskKeyOnce.Do(func() {
		mac := hmac.New(sha256.New, g.stateKey)
		mac.Write([]byte("mcpvisor task ids\x00"))
		block, err := aes.NewCipher(mac.Sum(nil))
		if err != nil {
			panic(err)
		}
		if g.taskCipher, err = cipher.NewGCM(block); err != nil {
			panic(err)
		}
	})
	return g.taskCipher
}

// parseTaskID is what id says, if mcpvisor issued it. One id has one
// spelling (strict Base64), so that the book finds a task by the string
// the client sends.
func (g *Gateway) parseTaskID(id string) (taskRef, bool) {
	rest, ok := strings.CutPrefix(g.inner(id), taskIDPrefix)
	if !ok {
		return taskRef{}, false
	}
	sealed, err := base64.RawURLEncoding.Strict().DecodeString(rest)
	aead := g.taskAEAD()
	if err != nil || len(sealed) < aead.NonceSize()+aead.Overhead() {
		return taskRef{}, false
	}
	body, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], []byte(taskIDPrefix))
	var ref taskRef
	if err != nil || json.Unmarshal(body, &ref) != nil || ref.Server == "" || ref.Up == "" {
		return taskRef{}, false
	}
	return ref, true
}

// originOf is what a task id of srv says of where srv is: for a remote
// server a digest of its URL (a reload that points the name elsewhere
// makes its ids another server's), else "".
func originOf(srv *fleet.Server) string {
	u := srv.Config().URL
	if u == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(u))
	return base64.RawURLEncoding.EncodeToString(sum[:9])
}

// bindOf is the binding of w's tasks: its legacy session's (a digest of
// the session's key, which the id should not show); for a 2026-07-28
// request, its identity's (person and client), or "" when it has none.
func (g *Gateway) bindOf(w sender) string {
	mac := hmac.New(sha256.New, g.stateKey)
	if w.sess == nil {
		id := w.identity()
		if id == nil {
			return ""
		}
		mac.Write([]byte("identity\x00"))
		mac.Write([]byte(whoOf(id)))
		return base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:12])
	}
	mac.Write([]byte("session\x00"))
	mac.Write([]byte(w.sess.Key()))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:12])
}

// taskRunKey is the context key of the run (fleet.ConnRun) a task's
// request may go to: forward refuses to send it to another process.
type taskRunKey struct{}

// taskIDKey is in every result that creates a task, in either era.
var taskIDKey = []byte(`"taskId"`)

// taskCreated is resp, the answer of srv to w's tools/call, sent on the
// process of run (fleet.ConnRun), with the task it creates, if any, given
// mcpvisor's id (and recorded: the book holds the server awake while it
// works).
func (g *Gateway) taskCreated(w sender, srv *fleet.Server, run uint64, resp *rpc.Message) *rpc.Message {
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
	key := instanceKey(w, srv)
	ref := taskRef{Server: srv.Name(), Bind: g.bindOf(w), Run: run, Origin: originOf(srv), Up: up}
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
	g.tasks.add(g, &taskEntry{id: id, srv: srv, key: key, run: run, session: session, up: up, working: true}, ttlOf(ttl))
	return &out
}

// eraRun is the run of the process of srv that serves w's requests now:
// for a 2026-07-28 request on a dual-era server, its process for modern
// clients; else its process.
func eraRun(w sender, srv *fleet.Server) uint64 {
	primary, twin, _ := srv.Runs(instanceKey(w, srv))
	if w.req != nil && twin != 0 {
		return twin
	}
	return primary
}

// instanceKey is the key of the instance of srv that serves w: its own
// (a per-session server's), its identity's (a per-identity server's),
// else "" (the shared one).
func instanceKey(w sender, srv *fleet.Server) string {
	if srv.Private() {
		return srv.InstanceKey(w.key(), w.identity())
	}
	return ""
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
	if ref.Run != 0 {
		ctx = context.WithValue(ctx, taskRunKey{}, ref.Run)
	}
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
		case w.sess == nil && ref.Bind != "" && w.identity() != nil:
			return notFound("not found: it was issued to another identity's request, or to a client session")
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
	if ref.Origin != originOf(srv) {
		return notFound("is gone: server " + ref.Server + " is now another server (a reload changed its URL)")
	}
	if why := g.taskGone(w, srv, ref); why != "" {
		g.tasks.ended(id)
		return notFound("is gone: " + why + ", and a task lives only in the process that was working on it")
	}
	return srv, ref, nil
}

// taskGone says why the process that held the task ref, asked about by
// w, is gone; "" when it runs (or the task is a remote server's, which no
// process of mcpvisor's holds).
func (g *Gateway) taskGone(w sender, srv *fleet.Server, ref taskRef) string {
	if ref.Run == 0 {
		return ""
	}
	key := instanceKey(w, srv)
	primary, twin, running := srv.Runs(key)
	switch {
	case running && (ref.Run == primary || ref.Run == twin):
		return ""
	case key != "" && !running:
		return "the session's own process of server " + ref.Server + " has ended"
	case !running:
		return "server " + ref.Server + " is " + srv.Status().State
	}
	return "server " + ref.Server + " has restarted since (a new process)"
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
// that the book still records and whose processes run, as their servers
// list them now, in one page. A server whose process that held them is
// gone (dormant, stopped, restarted) is not asked, nor started; each
// server's pages are read in turn, all of them within fanOutTimeout.
func (g *Gateway) taskList(ctx context.Context, w sender, m *rpc.Message, related Sink, only *fleet.Server) *rpc.Message {
	if c, _ := rpc.StringMember(m.Params, "cursor"); c != "" {
		return errorResponse(m.ID, rpc.InvalidParams, "tasks/list: invalid cursor: mcpvisor lists every task of the session in one page")
	}
	ctx, cancel := context.WithTimeout(ctx, fanOutTimeout)
	defer cancel()
	tasks := []json.RawMessage{}
	for srv, entries := range g.tasks.ofSession(w.sess.Key(), only) {
		// Only the tasks of the process that runs there now, asked of
		// that process alone (taskRunKey): another would not know them,
		// or would know another client's task by one of their ids.
		run, _, running := srv.Runs(instanceKey(w, srv))
		ids := map[string]string{} // the server's id → the client's
		for _, e := range entries {
			if e.run == 0 || running && e.run == run {
				ids[e.up] = e.id
			}
		}
		if len(ids) == 0 {
			continue
		}
		sctx := ctx
		if run != 0 {
			sctx = context.WithValue(ctx, taskRunKey{}, run)
		}
		cursor := ""
		for range maxTaskPages {
			params := json.RawMessage(`{}`)
			if cursor != "" {
				params = mustJSON(map[string]string{"cursor": cursor})
			}
			resp := g.forward(sctx, w, srv, "tasks/list", params, m.ID, related)
			if resp.Error != nil {
				g.log.Info("tasks/list: a server's tasks are left out", "server", srv.Name(), "err", resp.Error.Message)
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
				if id, ok := ids[up]; ok {
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
	run     uint64 // the run of the process that holds it (0: a remote server's)
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

// upKey names a task as its server knows it: by the process that holds
// it and that process's id (another process may reuse the id).
type upKey struct {
	instKey
	run uint64
	up  string
}

// taskBook is the tasks mcpvisor gave ids to, until they end or their
// time does (ttlOf): which keep their instances awake (Working), which a
// legacy session lists, and where a 2025-11-25 server's status
// notification and requests go. Its methods are the only code that
// touches it; its lock is taken last (the fleet asks Working under its
// own), and nothing is called out while it is held.
type taskBook struct {
	mu        sync.Mutex
	byID      map[string]*taskEntry
	byUp      map[upKey]*taskEntry
	working   map[instKey]map[*taskEntry]struct{}
	bySession map[string]int // entries of each legacy session
	warned    bool
}

// add records e for d, and holds its instance awake meanwhile, unless
// the book is full (maxTaskEntries; maxSessionTasks of e's session): the
// task then works and routes, but is not recorded.
func (b *taskBook) add(g *Gateway, e *taskEntry, d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.byID) >= maxTaskEntries || e.session != "" && b.bySession[e.session] >= maxSessionTasks {
		if !b.warned {
			b.warned = true
			g.log.Warn("tasks: too many recorded; newer tasks work, but do not keep their servers awake, are not in tasks/list and get no status notifications",
				"recorded", len(b.byID), "session", e.session != "")
		}
		return
	}
	if b.byID == nil {
		b.byID, b.byUp, b.working, b.bySession = map[string]*taskEntry{}, map[upKey]*taskEntry{}, map[instKey]map[*taskEntry]struct{}{}, map[string]int{}
	}
	uk := upKey{instKey{e.srv, e.key}, e.run, e.up}
	if old := b.byUp[uk]; old != nil {
		b.dropLocked(old) // the same task again (a retried call's answer)
	}
	b.byID[e.id] = e
	b.byUp[uk] = e
	if e.session != "" {
		b.bySession[e.session]++
	}
	ik := instKey{e.srv, e.key}
	if b.working[ik] == nil {
		b.working[ik] = map[*taskEntry]struct{}{}
	}
	b.working[ik][e] = struct{}{}
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
	if b.byID[e.id] == e {
		delete(b.byID, e.id)
		if e.session != "" {
			if b.bySession[e.session]--; b.bySession[e.session] <= 0 {
				delete(b.bySession, e.session)
			}
		}
	}
	uk := upKey{instKey{e.srv, e.key}, e.run, e.up}
	if b.byUp[uk] == e {
		delete(b.byUp, uk)
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
	delete(b.working[ik], e)
	if len(b.working[ik]) == 0 {
		delete(b.working, ik)
	}
	return true
}

// ended tells the book that the task id has ended (or its server no
// longer knows it, or its process is gone): it no longer holds its
// instance awake. A legacy session's stays recorded, for its tasks/list,
// until its time is up.
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
// a client follows (fleet.TaskHolder): a working task of the process that
// runs there now (one of a process that ended holds nothing).
func (b *taskBook) Working(s *fleet.Server, key string) bool {
	primary, twin, running := s.Runs(key)
	b.mu.Lock()
	defer b.mu.Unlock()
	for e := range b.working[instKey{s, key}] {
		if e.run == 0 || running && (e.run == primary || e.run == twin) {
			return true
		}
	}
	return false
}

// ofSession is the tasks the session was given, by server (only's, when
// set), each the server's id → the client's, with the run that holds it.
func (b *taskBook) ofSession(session string, only *fleet.Server) map[*fleet.Server][]*taskEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[*fleet.Server][]*taskEntry{}
	for _, e := range b.byID {
		if e.session == session && (only == nil || e.srv == only) {
			c := *e
			c.timer = nil
			out[e.srv] = append(out[e.srv], &c)
		}
	}
	return out
}

// byServerID is the task the instance keyed key of s knows as up on the
// process of run, if recorded: its client's id and session.
func (b *taskBook) byServerID(s *fleet.Server, key string, run uint64, up string) (id, session string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.byUp[upKey{instKey{s, key}, run, up}]
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
	// src.Session is the instance's key: "" for a shared one.
	id, session, ok := g.tasks.byServerID(src.Server, src.Session, fleet.ConnRun(src.Conn), up)
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

// relatedTask is the server's id of the task a 2025-11-25 server's
// message says it relates to (its _meta's related-task), if it says so.
func relatedTask(params json.RawMessage) (string, bool) {
	meta := rpc.Member(params, "_meta")
	if !bytes.Contains(meta, []byte(relatedTaskKey)) {
		return "", false
	}
	up, _ := rpc.StringMember(rpc.Member(meta, relatedTaskKey), "taskId")
	return up, up != ""
}

// askForTask relays m, a 2025-11-25 server's request that names the task
// up (input it asks for during the task), to the session the task was
// given to, on that session's tasks/result of the task in flight on the
// connection (else its newest request there), naming the task by the
// client's id — never to another
// client, whichever has requests in flight there. A task that is not
// recorded, or was given to no session, or whose session has no request
// in flight there, is refused: the server gets an error that says why.
func (g *Gateway) askForTask(src fleet.Source, m *rpc.Message, capName, up string) {
	conn := src.Conn
	// src.Session is the instance's key: "" for a shared one.
	id, session, ok := g.tasks.byServerID(src.Server, src.Session, fleet.ConnRun(conn), up)
	var s *Session
	if ok && session != "" {
		s = g.reg.sessionByKey(session)
	}
	var c *call
	if s != nil {
		c = g.reg.taskCallOf(conn, s, up)
	}
	switch {
	case c == nil:
		g.replyError(conn, m, rpc.InternalError, "mcpvisor cannot forward "+m.Method+" for task "+up+
			": no request of the client session the task was given to is in flight on this server (the client reads it with tasks/result)")
	case capName != "" && !g.reg.declares(s, capName):
		g.refuseUndeclared(conn, m, capName)
	default:
		meta := rpc.Member(m.Params, "_meta")
		rel, _ := rpc.ReplaceMember(rpc.Member(meta, relatedTaskKey), "taskId", mustJSON(id))
		meta, _ = rpc.ReplaceMember(meta, relatedTaskKey, rel)
		params, _ := rpc.ReplaceMember(m.Params, "_meta", meta)
		g.askLegacy(conn, m, c, params)
	}
}

package testserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/revision"
)

// ServerName and Version are what initialize reports in serverInfo.
const (
	ServerName = "mcp-fixture"
	Version    = "0.1.0"
)

// LatestProtocolVersion is the MCP revision answered when the client asks
// for one the fixture does not know.
const LatestProtocolVersion = "2025-11-25"

// SupportedProtocolVersions are the MCP revisions the fixture agrees to.
var SupportedProtocolVersions = []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"}

// GarbageLine is what -garbage writes before each response.
const GarbageLine = "this is not json {"

// JSON-RPC error codes.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
	codeInvalidParams  = -32602
)

// held is what -hold-mb allocates, kept until the process exits.
var held []byte

// Main runs the fixture with the given command-line arguments (without the
// program name) on the given streams and returns the process exit code.
//
// Settings not given as flags are read from the FIXTURE_* environment
// variables of this process. Some behaviours act on the whole process, so they
// only make sense in the mcp-fixture binary: -ignore-term changes signal
// handling, -setsid-child and -stdout-child re-execute os.Executable(), the
// crash tool and -crash-after call os.Exit, and -ignore-eof never returns.
//
// Start-up runs in this order: -crash-at-start, -ignore-term, -stderr-lines,
// -setsid-child and -stdout-child (their grandchildren already ignore SIGTERM
// when Main goes on), -hold-mb, -grow-mb, -fork-bomb, -spin, -slow-start,
// -flock (which may wait), -huge-line; then Main serves (over HTTP with
// -http, where -huge-line does not apply).
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) >= 1 && len(args) <= 2 && (args[0] == "-linger" || args[0] == "--linger") {
		// Hidden mode of the grandchildren spawned by -setsid-child and
		// -stdout-child; the second argument names the ready pipe.
		linger(args[1:])
	}
	cfg, err := parseConfig(args, os.Getenv, stderr)
	if isHelp(err) {
		return 0
	}
	if err != nil {
		return 2
	}
	logger := log.New(stderr, fmt.Sprintf("%s[%d]: ", ServerName, os.Getpid()), 0)
	if cfg.crashAtStart {
		logger.Printf("crashing at start as asked (-crash-at-start)")
		return 3
	}
	if cfg.ignoreTerm {
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		logger.Printf("ignoring SIGTERM, SIGINT and SIGHUP")
	}
	for i := 1; i <= cfg.stderrLines; i++ {
		fmt.Fprintf(stderr, "stderr line %d\n", i)
	}
	if cfg.setsidChild {
		pid, err := spawnLinger(true, nil, nil)
		if err != nil {
			logger.Printf("-setsid-child: %v", err)
			return 1
		}
		logger.Printf("started lingering grandchild %d in a new session", pid)
	}
	if cfg.stdoutChild {
		out, ok := stdout.(*os.File)
		if !ok {
			logger.Printf("-stdout-child: stdout is not a file")
			return 1
		}
		errf, _ := stderr.(*os.File)
		pid, err := spawnLinger(false, out, errf)
		if err != nil {
			logger.Printf("-stdout-child: %v", err)
			return 1
		}
		logger.Printf("started lingering grandchild %d holding stdout", pid)
	}
	if cfg.holdMB > 0 {
		held = make([]byte, cfg.holdMB<<20)
		for i := 0; i < len(held); i += 4096 {
			held[i] = 1 // resident: every page touched
		}
		logger.Printf("holding %d MiB", cfg.holdMB)
	}
	if cfg.growMB > 0 {
		grow(cfg.growMB, growStepMB, growInterval)
		logger.Printf("grew %d MiB", cfg.growMB)
	}
	if cfg.forkBomb > 0 {
		n, err := forkBomb(cfg.forkBomb)
		logger.Printf("fork bomb: %d children sleeping; stopped by: %v", n, err)
	}
	if cfg.spin > 0 {
		n := spin(cfg.spin)
		logger.Printf("spun %v (%d rounds)", cfg.spin, n)
	}
	if cfg.slowStart > 0 {
		logger.Printf("slow start: sleeping %v", cfg.slowStart)
		time.Sleep(cfg.slowStart)
	}
	if cfg.flock != "" {
		f, err := takeFlock(cfg.flock, logger)
		if err != nil {
			logger.Printf("-flock: %v", err)
			return 1
		}
		defer f.Close() // held until Main returns, which ends the process
	}
	if cfg.httpAddr != "" {
		return serveHTTP(cfg, logger)
	}
	s := newServer(cfg, stdout, logger)
	defer s.stop()
	if cfg.hugeLine > 0 {
		s.writeHugeLine(cfg.hugeLine)
	}
	return s.serve(stdin)
}

// linger sleeps until killed, ignoring the polite signals. Once they are
// ignored it says so on the ready pipe, if args names one.
func linger(args []string) {
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if len(args) == 1 {
		signalReady(args[0])
	}
	blockForever()
}

// blockForever never returns. It sleeps rather than blocking on a channel so
// that the runtime never sees a deadlock.
func blockForever() {
	for {
		time.Sleep(time.Hour)
	}
}

// server is one run of the JSON-RPC loop.
type server struct {
	cfg config
	log *log.Logger

	ctx    context.Context // cancelled on stdin EOF
	cancel context.CancelFunc
	wg     sync.WaitGroup // in-flight tools/call goroutines

	writeMu     sync.Mutex // serialises writes to out
	out         io.Writer
	toolAnswers int // responses sent to tools/call, under writeMu

	mu       sync.Mutex
	inflight map[string]*call         // by request id
	asked    map[string]chan incoming // the fixture's own requests to its client, by id
	askSeq   int

	tools  []tool   // served (-tools-variant)
	skills []*skill // served (-skills)

	wedged atomic.Bool // set by the wedge tool: stop reading stdin
	inited atomic.Bool // initialize was answered (-strict-init)

	// -ask-roots: the first tools/call asks the client for roots/list
	// (rootsOnce) and every call waits for the answer (rootsDone), which
	// the roots tool returns (rootsGot, set before rootsDone closes).
	rootsOnce sync.Once
	rootsDone chan struct{}
	rootsGot  string

	clientCaps string   // the capabilities initialize declared, under mu
	notes      []string // the methods of the notifications received, under mu
}

// call is one in-flight tools/call.
type call struct {
	cancel    context.CancelFunc
	cancelled bool // by notifications/cancelled; under server.mu
}

func newServer(cfg config, out io.Writer, logger *log.Logger) *server {
	ctx, cancel := context.WithCancel(context.Background())
	return &server{
		cfg:       cfg,
		tools:     toolsWith(cfg),
		skills:    skillsOf(cfg.skills),
		log:       logger,
		ctx:       ctx,
		cancel:    cancel,
		out:       out,
		inflight:  map[string]*call{},
		rootsDone: make(chan struct{}),
	}
}

// askRoots asks the client for roots/list once per process, and records
// its answer ("roots: RESULT" or "roots refused: CODE MESSAGE").
func (s *server) askRoots() {
	s.rootsOnce.Do(func() {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			m, err := s.ask(s.ctx, "roots/list", map[string]any{})
			switch {
			case err != nil:
				s.rootsGot = "roots not answered: " + err.Error()
			case m.Error != nil:
				var e rpcError
				_ = json.Unmarshal(m.Error, &e)
				s.rootsGot = fmt.Sprintf("roots refused: %d %s", e.Code, e.Message)
			default:
				s.rootsGot = "roots: " + string(m.Result)
			}
			s.log.Printf("roots/list: %s", s.rootsGot)
			close(s.rootsDone)
		}()
	})
}

// ask sends the client a request and waits for its response, or for ctx.
func (s *server) ask(ctx context.Context, method string, params any) (incoming, error) {
	s.mu.Lock()
	s.askSeq++
	id := json.RawMessage(strconv.Quote("fx-" + strconv.Itoa(s.askSeq)))
	ch := make(chan incoming, 1)
	if s.asked == nil {
		s.asked = map[string]chan incoming{}
	}
	s.asked[idKey(id)] = ch
	s.mu.Unlock()
	s.write(request{JSONRPC: "2.0", ID: id, Method: method, Params: params}, false, false)
	select {
	case m := <-ch:
		return m, nil
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.asked, idKey(id))
		s.mu.Unlock()
		return incoming{}, ctx.Err()
	}
}

// stop interrupts and waits for every in-flight call.
func (s *server) stop() {
	s.cancel()
	s.wg.Wait()
}

// serve reads messages until stdin ends and returns the exit code.
func (s *server) serve(stdin io.Reader) int {
	r := bufio.NewReaderSize(stdin, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			s.handleLine(line)
		}
		if s.wedged.Load() {
			s.log.Printf("no longer reading stdin (wedge)")
			blockForever()
		}
		if err == nil {
			continue
		}
		code := 0
		if err != io.EOF {
			s.log.Printf("reading stdin: %v", err)
			code = 1
		}
		if s.cfg.ignoreEOF {
			s.log.Printf("stdin closed; not exiting (-ignore-eof)")
			blockForever()
		}
		s.finishInFlight()
		s.log.Printf("stdin closed; exiting with code %d", code)
		return code
	}
}

// eofGrace is how long calls in flight at stdin EOF may still run.
const eofGrace = time.Second

// finishInFlight lets the calls in flight answer if they end within
// eofGrace, then interrupts the rest, which answer nothing.
func (s *server) finishInFlight() {
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(eofGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.log.Printf("interrupting the calls still in flight")
	}
	s.stop()
	<-done
}

// incoming is any JSON-RPC message. Absent fields stay nil; a JSON null
// becomes the raw text "null".
type incoming struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// request is a request the fixture sends its client (the sample tool).
type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  any             `json:"params,omitempty"`
}

type notification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

var nullID = json.RawMessage("null")

// validID reports whether id is a JSON string or number, the only ids MCP
// allows.
func validID(id json.RawMessage) bool {
	id = bytes.TrimSpace(id)
	if len(id) == 0 {
		return false
	}
	switch c := id[0]; {
	case c == '"':
		return true
	case c == '-' || (c >= '0' && c <= '9'):
		return true
	}
	return false
}

func idKey(id json.RawMessage) string { return string(bytes.TrimSpace(id)) }

func (s *server) handleLine(line []byte) {
	line = bytes.TrimSpace(line)
	if !json.Valid(line) {
		if s.cfg.neverAnswer {
			s.log.Printf("never-answer: dropping malformed line")
			return
		}
		s.sendError(nullID, codeParseError, "Parse error")
		return
	}
	var m incoming
	if err := json.Unmarshal(line, &m); err != nil {
		if s.cfg.neverAnswer {
			s.log.Printf("never-answer: dropping invalid message")
			return
		}
		s.sendError(nullID, codeInvalidRequest, "Invalid Request: not a JSON-RPC message object")
		return
	}
	if s.cfg.neverAnswer {
		s.log.Printf("never-answer: not answering %q (id %s)", m.Method, m.ID)
		return
	}
	id := nullID
	if validID(m.ID) {
		id = m.ID
	}
	if m.Method == "" {
		if m.ID != nil && (m.Result != nil || m.Error != nil) {
			// A response: to a request of the sample tool's, or noise.
			s.mu.Lock()
			ch := s.asked[idKey(m.ID)]
			delete(s.asked, idKey(m.ID))
			s.mu.Unlock()
			if ch == nil {
				s.log.Printf("ignoring response with id %s: no request of ours", m.ID)
				return
			}
			ch <- m
			return
		}
		s.sendError(id, codeInvalidRequest, "Invalid Request: missing method")
		return
	}
	if m.JSONRPC != "2.0" {
		if m.ID == nil {
			s.log.Printf("dropping notification %q without jsonrpc \"2.0\"", m.Method)
			return
		}
		s.sendError(id, codeInvalidRequest, `Invalid Request: jsonrpc must be "2.0"`)
		return
	}
	if m.ID == nil {
		s.handleNotification(m)
		return
	}
	if !validID(m.ID) {
		s.sendError(nullID, codeInvalidRequest, "Invalid Request: id must be a string or a number")
		return
	}
	s.handleRequest(m)
}

func (s *server) handleNotification(m incoming) {
	s.mu.Lock()
	if len(s.notes) < 64 { // the first ones: what the tests look at
		s.notes = append(s.notes, m.Method)
	}
	s.mu.Unlock()
	switch m.Method {
	case "notifications/initialized":
		if s.cfg.askRoots && s.cfg.askRootsAtInit {
			s.askRoots()
		}
		s.log.Printf("client initialized")
	case "notifications/cancelled":
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
			Reason    string          `json:"reason"`
		}
		if err := json.Unmarshal(orEmpty(m.Params), &p); err != nil || !validID(p.RequestID) {
			s.log.Printf("ignoring malformed notifications/cancelled")
			return
		}
		s.mu.Lock()
		c := s.inflight[idKey(p.RequestID)]
		if c != nil {
			c.cancelled = true
			c.cancel()
		}
		s.mu.Unlock()
		if c == nil {
			s.log.Printf("cancel of request %s: not in flight", p.RequestID)
			return
		}
		s.log.Printf("request %s cancelled (reason %q)", p.RequestID, p.Reason)
	default:
		s.log.Printf("ignoring notification %q", m.Method)
	}
}

func (s *server) handleRequest(m incoming) {
	if s.cfg.strictInit && m.Method != "initialize" && !s.inited.Load() {
		s.log.Printf("%s before initialize: exiting with code 4 (-strict-init)", m.Method)
		if s.cfg.strictLog != "" {
			if f, err := os.OpenFile(s.cfg.strictLog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
				fmt.Fprintln(f, m.Method)
				f.Close()
			}
		}
		s.writeMu.Lock() // no half-written line on the way out
		os.Exit(4)
	}
	if s.cfg.methodLog != "" {
		if f, err := os.OpenFile(s.cfg.methodLog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
			fmt.Fprintln(f, m.Method)
			f.Close()
		}
	}
	if s.cfg.modernOnly && (m.Method == "initialize" || m.Method == "server/discover") {
		s.modernOnly(m)
		return
	}
	if len(s.skills) > 0 && s.skillsRequest(m) {
		return
	}
	switch m.Method {
	case "initialize":
		s.initialize(m)
	case "ping", "logging/setLevel":
		s.reply(m.ID, struct{}{})
	case "tools/list":
		s.reply(m.ID, s.modernResult(m.Method, map[string]any{"tools": s.tools}))
	case "tools/call":
		s.startCall(m)
	case "resources/list":
		if len(s.skills) > 0 {
			s.reply(m.ID, s.modernResult(m.Method, map[string]any{"resources": s.skillResources()}))
			return
		}
		if s.cfg.uiURI == "" {
			s.sendError(m.ID, codeMethodNotFound, "Method not found: "+m.Method)
			return
		}
		s.reply(m.ID, map[string]any{"resources": []any{}})
	case "resources/templates/list":
		if len(s.skills) == 0 {
			s.sendError(m.ID, codeMethodNotFound, "Method not found: "+m.Method)
			return
		}
		s.reply(m.ID, s.modernResult(m.Method, map[string]any{"resourceTemplates": []any{}}))
	case "resources/read":
		var p struct{ URI string }
		_ = json.Unmarshal(orEmpty(m.Params), &p)
		uri := p.URI
		if len(s.skills) > 0 && s.readSkillFile(m, uri) {
			return
		}
		if s.cfg.uiURI == "" || uri != s.cfg.uiURI {
			s.sendError(m.ID, -32002, "Resource not found: "+uri)
			return
		}
		s.reply(m.ID, map[string]any{"contents": []any{map[string]any{"uri": uri, "mimeType": "text/html;profile=mcp-app", "text": viewHTML()}}})
	default:
		if strings.HasSuffix(m.Method, "/describe") {
			// A method no revision of MCP has, as an extension's would
			// be: its answer says which server got it (FIXTURE_TAG from
			// its environment), and with what.
			s.reply(m.ID, map[string]any{"method": m.Method, "params": json.RawMessage(orEmpty(m.Params)), "tag": os.Getenv("FIXTURE_TAG")})
			return
		}
		s.sendError(m.ID, codeMethodNotFound, "Method not found: "+m.Method)
	}
}

func (s *server) initialize(m incoming) {
	var p struct {
		ProtocolVersion string          `json:"protocolVersion"`
		Capabilities    json.RawMessage `json:"capabilities"`
	}
	if err := json.Unmarshal(orEmpty(m.Params), &p); err != nil {
		s.sendError(m.ID, codeInvalidParams, "Invalid params: "+err.Error())
		return
	}
	s.mu.Lock()
	s.clientCaps = string(p.Capabilities)
	s.mu.Unlock()
	version := LatestProtocolVersion
	for _, v := range SupportedProtocolVersions {
		if p.ProtocolVersion == v {
			version = v
		}
	}
	caps := map[string]any{
		"tools":   map[string]any{"listChanged": true},
		"logging": struct{}{},
	}
	if s.cfg.uiURI != "" {
		caps["resources"] = struct{}{}
	}
	s.addSkillsCaps(caps)
	s.reply(m.ID, map[string]any{
		"protocolVersion": version,
		"capabilities":    caps,
		"serverInfo":      map[string]any{"name": ServerName, "version": Version},
	})
	s.inited.Store(true)
}

// ModernVersion is the revision a -modern-only fixture speaks.
const ModernVersion = "2026-07-28"

// modernOnly answers initialize and server/discover as a server that
// speaks ModernVersion only: initialize is refused with an error naming
// it (as such a server should), server/discover listed with it alone.
// Each is logged to -strict-init-log, if set.
func (s *server) modernOnly(m incoming) {
	if s.cfg.strictLog != "" {
		if f, err := os.OpenFile(s.cfg.strictLog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
			fmt.Fprintln(f, m.Method)
			f.Close()
		}
	}
	if m.Method == "initialize" {
		s.sendError(m.ID, codeInvalidRequest, "this server speaks MCP "+ModernVersion+" only: send requests with _meta, no initialize")
		return
	}
	caps := map[string]any{
		"tools": map[string]any{"listChanged": true},
	}
	s.addSkillsCaps(caps)
	s.reply(m.ID, s.modernResult(m.Method, map[string]any{
		"supportedVersions": []string{ModernVersion},
		"capabilities":      caps,
	}))
}

// orEmpty turns absent or null params into an empty object.
func orEmpty(params json.RawMessage) json.RawMessage {
	if len(params) == 0 || string(params) == "null" {
		return json.RawMessage("{}")
	}
	return params
}

// startCall checks a tools/call and runs the tool in its own goroutine.
func (s *server) startCall(m incoming) {
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Meta      json.RawMessage `json:"_meta"`
	}
	var meta struct {
		ProgressToken json.RawMessage `json:"progressToken"`
	}
	err := json.Unmarshal(orEmpty(m.Params), &p)
	if err == nil && len(p.Meta) > 0 {
		err = json.Unmarshal(p.Meta, &meta)
	}
	if err != nil {
		s.sendCallResponse(m.ID, response{Error: &rpcError{codeInvalidParams, "Invalid params: " + err.Error()}})
		return
	}
	t := s.findTool(p.Name)
	if t == nil {
		s.sendCallResponse(m.ID, response{Error: &rpcError{codeInvalidParams, fmt.Sprintf("Unknown tool: %q", p.Name)}})
		return
	}
	token := meta.ProgressToken
	if !validID(token) {
		token = nil
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.WithValue(s.ctx, metaKey{}, p.Meta), paramsKey{}, orEmpty(m.Params)))
	if s.cfg.askRoots {
		s.askRoots()
	}
	c := &call{cancel: cancel}
	key := idKey(m.ID)
	s.mu.Lock()
	s.inflight[key] = c
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		res, ok := toolResult{}, false // interrupted while it waited for roots: it answers nothing
		waited := true
		if s.cfg.askRoots {
			select { // no call is answered before the client's roots
			case <-s.rootsDone:
			case <-ctx.Done():
				waited = false
			}
		}
		if waited {
			res, ok = t.run(ctx, s, p.Arguments, token)
		}
		s.mu.Lock()
		if s.inflight[key] == c {
			delete(s.inflight, key)
		}
		cancelled := c.cancelled
		s.mu.Unlock()
		cancel()
		switch {
		case cancelled:
			s.log.Printf("request %s was cancelled: not answering", m.ID)
		case !ok:
			s.log.Printf("request %s interrupted: not answering", m.ID)
		default:
			s.sendCallResponse(m.ID, response{Result: s.modernResult("tools/call", res)})
		}
	}()
}

func (s *server) reply(id json.RawMessage, result any) {
	s.write(response{JSONRPC: "2.0", ID: id, Result: result}, true, false)
}

func (s *server) sendError(id json.RawMessage, code int, msg string) {
	s.write(response{JSONRPC: "2.0", ID: id, Error: &rpcError{code, msg}}, true, false)
}

func (s *server) sendCallResponse(id json.RawMessage, r response) {
	r.JSONRPC, r.ID = "2.0", id
	s.write(r, true, true)
}

func (s *server) notify(method string, params any) {
	if s.cfg.modernOnly {
		if p, ok := params.(map[string]any); ok {
			meta := map[string]any{}
			for _, name := range revision.Names(revision.Modern, revision.InNotificationMeta, method) {
				meta[name] = "fixture-listen"
			}
			p["_meta"] = meta
		}
	}
	s.write(notification{JSONRPC: "2.0", Method: method, Params: params}, false, false)
}

// modernResult is result, of a request of method, as a -modern-only
// fixture sends it: with every member the modern era's schema requires of
// such a result and the legacy era's has not (revision.Members), and every
// reserved key of a result's _meta — so that tests see that none of them
// reaches a legacy client. Other fixtures send result as it is.
func (s *server) modernResult(method string, result any) any {
	if !s.cfg.modernOnly {
		return result
	}
	b, err := json.Marshal(result)
	var out map[string]any
	if err != nil || json.Unmarshal(b, &out) != nil {
		return result
	}
	for _, m := range revision.Members {
		if m.Era != revision.Modern || m.Place != revision.InResult || !m.Required || !m.For(method) {
			continue
		}
		switch m.Name {
		case "resultType":
			out[m.Name] = "complete"
		case "ttlMs":
			out[m.Name] = 0
		case "cacheScope":
			out[m.Name] = "public"
		default:
			out[m.Name] = "fixture"
		}
	}
	meta := map[string]any{}
	for _, name := range revision.Names(revision.Modern, revision.InResultMeta, method) {
		meta[name] = map[string]any{"name": ServerName, "version": Version}
	}
	out["_meta"] = meta
	return out
}

// write sends one message as one line. Responses get the -garbage line
// first; the -crash-after'th tools/call response ends the process.
func (s *server) write(msg any, isResponse, isCallResponse bool) {
	data, err := json.Marshal(msg)
	if err != nil {
		s.log.Printf("encoding message: %v", err)
		return
	}
	data = append(data, '\n')
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if isResponse && s.cfg.garbage {
		s.writeLocked([]byte(GarbageLine + "\n"))
	}
	s.writeLocked(data)
	if isCallResponse {
		s.toolAnswers++
		if s.cfg.crashAfter > 0 && s.toolAnswers == s.cfg.crashAfter {
			s.log.Printf("exiting with code 3 after tools/call number %d (-crash-after)", s.toolAnswers)
			os.Exit(3)
		}
	}
}

func (s *server) writeLocked(data []byte) {
	if _, err := s.out.Write(data); err != nil {
		s.log.Printf("writing stdout: %v", err)
	}
}

// hugeLinePrefix and hugeLineSuffix frame the padding of -huge-line.
const (
	hugeLinePrefix = `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","logger":"mcp-fixture","data":"`
	hugeLineSuffix = `"}}`
)

// writeHugeLine writes a notifications/message line of exactly size bytes
// before the newline (or the shortest such line, if size is smaller).
func (s *server) writeHugeLine(size int) {
	pad := max(size-len(hugeLinePrefix)-len(hugeLineSuffix), 0)
	var b strings.Builder
	b.Grow(size + 1)
	b.WriteString(hugeLinePrefix)
	b.WriteString(strings.Repeat("x", pad))
	b.WriteString(hugeLineSuffix)
	b.WriteByte('\n')
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.writeLocked([]byte(b.String()))
	s.log.Printf("wrote a line of %d bytes (-huge-line)", b.Len()-1)
}

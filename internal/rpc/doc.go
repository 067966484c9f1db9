// Package rpc is mcpvisor's one framing core: newline-delimited JSON-RPC
// 2.0 over a byte stream, used to talk to a stdio MCP server's stdin and
// stdout and as the server side of mcpvisor's own stdio front.
//
// It parses only the envelope — jsonrpc, id, method, and where result,
// params and error sit — and keeps bodies as the exact bytes of the wire
// (json.RawMessage), so unknown fields and future methods pass through and
// a relayed result is never decoded. Decode is a single validating pass
// over the line (no encoding/json on the hot path); a Conn copies each
// good line once, and every field of the Message it delivers is a slice of
// that copy.
//
// Lines are limited (DefaultMaxLine, 16 MiB). A longer line costs only
// itself: it is skipped, never held whole, and if its top-level id (found
// wherever it sits in the line) names a pending call, that call fails at
// once with a *LineTooLongError ("response from server exceeds 16 MiB line
// limit"). A line that is not JSON-RPC is reported and
// counted, and fails the call it names, if any; the connection goes on.
//
// Writes are bounded. No sender is ever stuck in a Write on a peer that
// stops reading (a child whose stdin pipe is full): a sender writes only
// what a pipe takes without blocking, and a goroutine of the connection
// writes the rest and whatever is queued meanwhile. Call and the Context
// variants of Notify, Reply, ReplyError and Write return when their
// context ends, the others after Options.WriteTimeout (DefaultWriteTimeout,
// 10 s) with an error wrapping ErrWriteTimeout. A line not yet being
// written when its sender gives up is withdrawn; one already being written
// is finished whole, so the stream stays framed. Options.StallTimeout, for
// writers that nothing interrupts (a process's own stdout), ends the
// connection when its peer has stopped reading.
//
// Relays: Call gives every request a fresh integer id, so clients that
// reuse ids cannot collide on one backend; the relay keeps the client's id
// and sets it back on the response before it writes it on. ProgressToken,
// ReplaceProgressToken and CancelledRequestID read (and rewrite) the few
// params a relay routes on without decoding the rest.
package rpc

package rpc

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// JSON-RPC 2.0 error codes.
const (
	ParseError     = -32700 // the line is not valid JSON
	InvalidRequest = -32600 // valid JSON, but not a JSON-RPC 2.0 message (batches included)
	MethodNotFound = -32601
	InvalidParams  = -32602
	InternalError  = -32603
)

// MCP's own codes (2026-07-28, basic/index: -32020 to -32099 are the
// specification's).
const (
	// HeaderMismatch: an HTTP request's MCP headers are missing, malformed,
	// or do not match its body.
	HeaderMismatch = -32020
	// MissingClientCapability: the request needs a client capability its
	// _meta did not declare.
	MissingClientCapability = -32021
	// UnsupportedProtocolVersion: the request's protocol version is not
	// served; data lists the supported ones and echoes the requested one.
	UnsupportedProtocolVersion = -32022
)

// mcpvisor's own codes, in JSON-RPC's implementation-defined server-error
// range (-32000 to -32019, which MCP leaves to implementations). MCP
// itself uses -32002 (resource not found, until 2025-11-25), -32020 to
// -32022 (above) and -32042 (URL elicitation required); these stay clear
// of them. -32000 and -32001 mean the same as in the MCP
// TypeScript SDK (ConnectionClosed, RequestTimeout).
const (
	// BackendUnavailable: the server that would answer is not running and
	// could not be started, or its connection ended before it answered.
	BackendUnavailable = -32000
	// RequestTimeout: the server did not answer within the request timeout.
	RequestTimeout = -32001
	// MessageTooLarge: the server's answer exceeded the line limit.
	MessageTooLarge = -32010
	// LimitReached: a configured limit of mcpvisor (client sessions,
	// instances of a per-session server) refused the request; the message
	// names it. The HTTP front answers it with 503.
	LimitReached = -32011
	// NotPermitted: the policy does not permit the request to its
	// identity. The client is told no more; the audit is told why.
	NotPermitted = -32012
	// RateLimited: the identity is over a configured rate limit; the
	// message says when to try again. The HTTP front answers it with 429
	// and Retry-After.
	RateLimited = -32013
	// InsufficientScope: the identity's token lacks a scope the server
	// needs (auth.serverScopes), through /mcp; data.scope lists every
	// scope needed. The HTTP front answers it with 403 and an
	// insufficient_scope challenge, so that a client can step up.
	InsufficientScope = -32014
)

var (
	// ErrClosed is wrapped by every error that reports a connection that
	// has ended: Call, Notify and Write after the end, and the failure of
	// calls pending at the end. The cause (io.EOF when the peer closed
	// its output, a read or write error, a context's cause) is wrapped
	// too.
	ErrClosed = errors.New("rpc: connection closed")

	// ErrLineTooLong is wrapped by LineTooLongError.
	ErrLineTooLong = errors.New("rpc: line too long")

	// ErrUnknownID is wrapped by the error reported to Options.OnError
	// for a response whose id matches no pending call.
	ErrUnknownID = errors.New("rpc: response for unknown request id")

	// ErrWriteTimeout is wrapped by the error of Notify, Reply,
	// ReplyError and Write when Options.WriteTimeout passes before their
	// line is written, and by the report to Options.OnError of a line of
	// the connection's own dropped for want of room in time.
	ErrWriteTimeout = errors.New("rpc: write timed out")

	// ErrWriteStalled is wrapped by the end of a connection whose writer
	// was in one Write for Options.StallTimeout: its peer has stopped
	// reading.
	ErrWriteStalled = errors.New("rpc: the peer stopped reading")
)

// Error is a JSON-RPC error object. It is an error, so a caller that wants
// a failed response as a Go error can return msg.Error.
type Error struct {
	Code    int
	Message string
	Data    json.RawMessage // nil when absent
}

func (e *Error) Error() string {
	return "rpc: error " + strconv.Itoa(e.Code) + ": " + e.Message
}

// DecodeError is why a line is not a JSON-RPC 2.0 message. Code is
// ParseError (not JSON) or InvalidRequest (JSON, but not a message).
type DecodeError struct {
	Code   int
	Offset int    // byte offset of a syntax error; 0 for InvalidRequest
	Reason string // what is wrong
	// ID is the message's id when one could still be read (the start of
	// an invalid line is scanned for it), else nil. Request reports that
	// the object had a "method" or "params" member, so ID is the peer's
	// request id, not one of ours.
	ID      json.RawMessage
	Request bool
}

func (e *DecodeError) Error() string {
	if e.Code == ParseError {
		return fmt.Sprintf("rpc: invalid JSON at byte %d: %s", e.Offset, e.Reason)
	}
	return "rpc: invalid JSON-RPC message: " + e.Reason
}

// LineTooLongError is a line that exceeded the connection's line limit.
// The line is skipped; the connection goes on.
type LineTooLongError struct {
	Kind  string          // "response", "request" or "line" (when the start did not tell)
	Peer  string          // Options.PeerName
	Limit int             // the limit in bytes
	Size  int64           // the line's length in bytes, without its newline
	ID    json.RawMessage // the line's top-level id, wherever it sat, if one was found
}

func (e *LineTooLongError) Error() string {
	return fmt.Sprintf("%s from %s exceeds %s line limit", e.Kind, e.Peer, byteSize(e.Limit))
}

func (e *LineTooLongError) Unwrap() error { return ErrLineTooLong }

// writeError is a sender that gave up before its line was written: its
// context ended or the write timeout passed (the cause, wrapped). Unless
// started, the line was withdrawn and is never written; if started, the
// connection's writer had taken it and finishes it.
type writeError struct {
	peer    string
	cause   error
	started bool
}

func (e *writeError) Error() string {
	if e.started {
		return "rpc: gave up on a line to " + e.peer + " already being written (the connection finishes it): " + e.cause.Error()
	}
	return "rpc: line to " + e.peer + " withdrawn unwritten: " + e.cause.Error()
}

func (e *writeError) Unwrap() error { return e.cause }

// closedError is the end of a connection, with its cause.
type closedError struct{ cause error }

func (e *closedError) Error() string {
	if e.cause == nil {
		return ErrClosed.Error()
	}
	return ErrClosed.Error() + ": " + e.cause.Error()
}

func (e *closedError) Is(target error) bool { return target == ErrClosed }
func (e *closedError) Unwrap() error        { return e.cause }

// byteSize formats n as "16 MiB", "64 KiB" or "1000 bytes".
func byteSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + " KiB"
	default:
		return strconv.Itoa(n) + "-byte"
	}
}

package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"

	"github.com/mcpvisor/mcpvisor/internal/rpc"
	"github.com/mcpvisor/mcpvisor/internal/telemetry"
)

// batchVersion is the only protocol revision with JSON-RPC batches
// (2025-03-26, basic/transports: a POST body or a stdio line may be an
// array of requests and notifications, or of responses). 2025-06-18
// removed them.
const batchVersion = "2025-03-26"

// batchWorkers bounds the requests of one batch that run at once, on
// either front: a batch as large as the body or line limit allows cannot
// start a goroutine (and a server call) per element at once.
const batchWorkers = 16

// batchRefused is the message that refuses a batch in a session at
// another revision than batchVersion ("" before initialize).
func batchRefused(version string) string {
	if version == "" {
		return "a JSON-RPC batch before initialize (initialize cannot be part of a batch)"
	}
	return "JSON-RPC batches are not part of MCP " + strconv.Quote(version) +
		", this session's protocol revision (only " + batchVersion + " has them); send each message on its own"
}

// splitBatch splits a JSON-RPC batch into its requests and its other
// messages (notifications and responses, in order), with an error
// response for each element that is not a valid message — with the
// element's id when it is a request's — or is an initialize (JSON-RPC
// 2.0, 6; MCP 2025-03-26); g counts each such element as a message its
// front refused (g.refuse, within ctx). A body that is not a JSON array of
// at least one element gets fail instead, and nothing in it is to be
// handled (nor counted: the caller counts the refusal of the whole).
func splitBatch(ctx context.Context, g *Gateway, body []byte) (reqs, others, errs []*rpc.Message, fail *rpc.Error) {
	var elems []json.RawMessage
	if err := json.Unmarshal(body, &elems); err != nil {
		return nil, nil, nil, &rpc.Error{Code: rpc.ParseError, Message: "Parse error: " + err.Error()}
	}
	if len(elems) == 0 {
		return nil, nil, nil, &rpc.Error{Code: rpc.InvalidRequest, Message: "Invalid Request: empty batch"}
	}
	for _, e := range elems {
		m, err := rpc.Decode(e)
		switch {
		case err != nil:
			var id json.RawMessage
			code, msg := rpc.InvalidRequest, err.Error()
			var de *rpc.DecodeError
			if errors.As(err, &de) {
				code = de.Code
				if de.Request {
					id = de.ID
				}
			}
			g.refuse(ctx, nil, id, telemetry.ProtocolError, code, msg)
			errs = append(errs, errorReply(id, code, msg))
		case m.IsRequest() && m.Method == "initialize":
			const msg = "initialize cannot be part of a batch"
			g.refuse(ctx, m, m.ID, telemetry.ProtocolError, rpc.InvalidRequest, msg)
			errs = append(errs, errorReply(m.ID, rpc.InvalidRequest, msg))
		case m.IsRequest():
			reqs = append(reqs, m)
		default:
			others = append(others, m)
		}
	}
	return reqs, others, errs, nil
}

// runBatch calls serve for each request concurrently, at most
// batchWorkers at a time, and returns when every call has returned.
func runBatch(reqs []*rpc.Message, serve func(*rpc.Message)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, batchWorkers)
	for _, m := range reqs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			serve(m)
		})
	}
	wg.Wait()
}

// errorReply is an error response; a nil id is null.
func errorReply(id json.RawMessage, code int, msg string) *rpc.Message {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	return &rpc.Message{ID: id, Error: &rpc.Error{Code: code, Message: msg}}
}

// Package bridge is the wire between `mcpvisor connect` and the shared
// `mcpvisor serve` daemon: a unix socket in the state directory, one
// client session per connection.
//
// A connection starts with one preface line from connect (Hello: the
// preface version, the server it wants — "" for all of them, aggregated —
// and a hint of which client launched connect), answered by one line from
// the daemon (Reply: ok, or an error such as an unknown server or a
// preface version it does not speak). After that the bytes are the MCP
// client's, newline-delimited JSON-RPC in either protocol era, relayed
// unchanged both ways: the daemon serves them with the same stdio front
// `mcpvisor stdio` serves its stdin and stdout with.
//
// Why a socket and not the daemon's Streamable HTTP endpoint: over a
// socket the relay is a byte copy — a stdio client's lines reach the stdio
// front as they are, in either era, with no HTTP session, SSE stream or
// header to translate — and it is the cheapest hop there is between two
// local processes.
//
// The package owns both ends of that wire: the preface (WriteHello,
// ReadHello, the replies), where the socket lives (SocketPath), listening
// on it without stealing a live daemon's (Listen), the daemon's accept
// loop (Server) and connect's relay (Relay). It knows nothing of MCP.
package bridge

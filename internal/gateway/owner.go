package gateway

// Replicas: what the gateway issues that a later request names — a legacy
// session's id, a held call's requestState, a task id — carries the
// replica that owns it, so that any replica forwards such a request to
// its owner in one hop (the daemon's forwarding front reads the stamp;
// DESIGN decision 16). The gateway only stamps what it issues and strips
// the stamp from what it is sent: routing is the front's.

// Stamper stamps the ids a gateway issues with their owner. Stamp's
// result must be a valid Mcp-Session-Id whenever its argument is. Inner
// returns the id Stamp was given, or s itself when s carries no stamp of
// this deployment's.
type Stamper interface {
	Stamp(id string) string
	Inner(s string) string
}

// SetStamper makes g stamp what it issues with st (nil: no stamps, a
// single mcpvisor). Call it once, before serving.
func (g *Gateway) SetStamper(st Stamper) { g.stamper = st }

// stamp is id stamped with its owner, or id without replicas (or
// without a gateway: a handler under test).
func (g *Gateway) stamp(id string) string {
	if g == nil || g.stamper == nil {
		return id
	}
	return g.stamper.Stamp(id)
}

// inner is s without its owner's stamp.
func (g *Gateway) inner(s string) string {
	if g == nil || g.stamper == nil {
		return s
	}
	return g.stamper.Inner(s)
}

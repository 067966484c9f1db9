package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/rpc"
)

// A kind of list a server serves: its list method, the member of the
// result that holds the items, and the capability that announces it.
type listKind struct {
	method, member, capability string
}

var (
	kindTools     = listKind{"tools/list", "tools", "tools"}
	kindPrompts   = listKind{"prompts/list", "prompts", "prompts"}
	kindResources = listKind{"resources/list", "resources", "resources"}
	kindTemplates = listKind{"resources/templates/list", "resourceTemplates", "resources"}
)

// catalog caches one server's lists, as the server sent their items, until
// the server says they changed or reconnects.
type catalog struct {
	mu    sync.Mutex
	lists map[string][]json.RawMessage
}

func (c *catalog) get(k listKind) ([]json.RawMessage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	items, ok := c.lists[k.member]
	return items, ok
}

func (c *catalog) put(k listKind, items []json.RawMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lists == nil {
		c.lists = map[string][]json.RawMessage{}
	}
	c.lists[k.member] = items
}

func (c *catalog) drop(members ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range members {
		delete(c.lists, m)
	}
}

// invalidate forgets a server's list after its list_changed notification.
func (g *Gateway) invalidate(server, method string) {
	cat := g.catalogs[server]
	if cat == nil {
		return
	}
	switch method {
	case "notifications/tools/list_changed":
		cat.drop(kindTools.member)
	case "notifications/prompts/list_changed":
		cat.drop(kindPrompts.member)
	case "notifications/resources/list_changed":
		cat.drop(kindResources.member, kindTemplates.member)
	}
	g.agg.invalidate()
}

// Reconnected forgets everything cached about a server that restarted;
// the fleet calls it.
func (g *Gateway) Reconnected(s *fleet.Server) {
	if cat := g.catalogs[s.Name()]; cat != nil {
		cat.drop(kindTools.member, kindPrompts.member, kindResources.member, kindTemplates.member)
	}
	g.agg.invalidate()
	for _, sess := range g.sessionsFor(s.Name()) {
		for _, n := range []string{"notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed"} {
			_ = sess.Out().Send(&rpc.Message{Method: n})
		}
	}
}

// fetch returns a server's whole list (every page), from the cache when it
// is there. A server without the capability has an empty list.
func (g *Gateway) fetch(ctx context.Context, srv *fleet.Server, k listKind) ([]json.RawMessage, error) {
	cat := g.catalogs[srv.Name()]
	if items, ok := cat.get(k); ok {
		return items, nil
	}
	conn, err := srv.Conn(ctx, "")
	if err != nil {
		return nil, err
	}
	if !conn.Init().Has(k.capability) {
		cat.put(k, nil)
		return nil, nil
	}
	var items []json.RawMessage
	cursor := ""
	for page := 0; ; page++ {
		if page > 1000 {
			return nil, fmt.Errorf("server %s: %s: more than 1000 pages", srv.Name(), k.method)
		}
		var params json.RawMessage
		if cursor != "" {
			params, _ = json.Marshal(map[string]string{"cursor": cursor})
		}
		resp, err := conn.Call(ctx, k.method, params)
		if err != nil {
			return nil, err
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("server %s: %s: %s", srv.Name(), k.method, resp.Error.Message)
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(resp.Result, &body); err != nil {
			return nil, fmt.Errorf("server %s: %s: malformed result: %v", srv.Name(), k.method, err)
		}
		var pageItems []json.RawMessage
		if raw := body[k.member]; len(raw) > 0 && string(raw) != "null" {
			if err := json.Unmarshal(raw, &pageItems); err != nil {
				return nil, fmt.Errorf("server %s: %s: malformed %s: %v", srv.Name(), k.method, k.member, err)
			}
		}
		items = append(items, pageItems...)
		cursor = ""
		if raw := body["nextCursor"]; len(raw) > 0 {
			_ = json.Unmarshal(raw, &cursor)
		}
		if cursor == "" {
			break
		}
	}
	cat.put(k, items)
	return items, nil
}

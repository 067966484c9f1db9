package authn

import (
	"sync"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/identity"
)

// tokenCache holds verified identities by the SHA-256 of their token
// until the token's exp, at most max of them.
type tokenCache struct {
	mu  sync.RWMutex
	m   map[[32]byte]*identity.Identity
	max int
}

func newTokenCache(max int) *tokenCache {
	return &tokenCache{m: make(map[[32]byte]*identity.Identity), max: max}
}

func (c *tokenCache) get(key [32]byte, now time.Time) *identity.Identity {
	c.mu.RLock()
	id := c.m[key]
	c.mu.RUnlock()
	if id == nil {
		return nil
	}
	if now.Before(id.Expiry) {
		return id
	}
	c.mu.Lock()
	if c.m[key] == id {
		delete(c.m, key)
	}
	c.mu.Unlock()
	return nil
}

func (c *tokenCache) put(key [32]byte, id *identity.Identity, now time.Time) {
	if !now.Before(id.Expiry) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		for k, e := range c.m {
			if !now.Before(e.Expiry) {
				delete(c.m, k)
			}
		}
		// Still full: drop entries at random (map order) down to 7/8.
		for k := range c.m {
			if len(c.m) < c.max-c.max/8 {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[key] = id
}

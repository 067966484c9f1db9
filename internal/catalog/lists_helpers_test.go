package catalog

import "encoding/json"

// generation is the lists' generation: a fetch that began at an older one
// is not stored.
func (c *lists) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// put stores a list in memory, as one not known to be on disk.
func (c *lists) put(k ListKind, items []json.RawMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(k, items, true)
}

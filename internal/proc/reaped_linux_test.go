package proc

// liveSpawns counts the children the spawner started that are not
// released yet.
func liveSpawns() int {
	theSpawner.mu.Lock()
	defer theSpawner.mu.Unlock()
	return theSpawner.live
}

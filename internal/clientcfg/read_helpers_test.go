package clientcfg

// Read reads one of the client's user files (no project) in format f.
func (c *Client) Read(data []byte, f Format) (*File, error) { return c.ReadIn(data, f, "") }

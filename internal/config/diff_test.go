package config

import (
	"slices"
	"testing"
)

func parseDiffCfg(t *testing.T, doc string) *Config {
	t.Helper()
	cfg, err := Parse([]byte(doc), "test.json", LoadOptions{LookupEnv: func(k string) (string, bool) {
		if k == "TOKEN" {
			return "s3cret-value", true
		}
		return "", false
	}})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestCompare(t *testing.T) {
	old := parseDiffCfg(t, `{"listen":"127.0.0.1:1","pageSize":10,"mcpServers":{
		"same":{"command":"x"},
		"env":{"command":"x","env":{"A":"1","B":"2"}},
		"hdr":{"url":"https://h.example/mcp","headers":{"Authorization":"Bearer old"}},
		"set":{"command":"x","idleTimeout":"1m","tools":{"deny":["a*"]}},
		"gone":{"command":"x"},
		"off":{"command":"x"},
		"stays-off":{"command":"x","disabled":true}}}`)
	new := parseDiffCfg(t, `{"listen":"127.0.0.1:2","pageSize":20,"mcpServers":{
		"same":{"command":"x"},
		"env":{"command":"x","env":{"A":"1","B":"3","C":"4"}},
		"hdr":{"url":"https://h.example/mcp","headers":{"Authorization":"Bearer ${TOKEN}"}},
		"set":{"command":"x","idleTimeout":"2m","tools":{"deny":["b*"]},"prefix":"p","pin":true},
		"off":{"command":"x","disabled":true},
		"stays-off":{"command":"y","disabled":true},
		"new":{"command":"x"}}}`)
	d := Compare(old, new)
	want := []ServerChange{
		{Name: "env", Action: ActionRestarted, Fields: []string{"env.B", "env.C"}},
		{Name: "gone", Action: ActionRemoved},
		{Name: "hdr", Action: ActionRestarted, Fields: []string{"headers.Authorization"}},
		{Name: "new", Action: ActionAdded},
		{Name: "off", Action: ActionRemoved, Fields: []string{"disabled"}},
		{Name: "same", Action: ActionUnchanged},
		{Name: "set", Action: ActionUpdated, Fields: []string{"pin", "prefix", "tools", "idleTimeout"}},
	}
	if len(d.Servers) != len(want) {
		t.Fatalf("servers = %+v", d.Servers)
	}
	for i, w := range want {
		g := d.Servers[i]
		if g.Name != w.Name || g.Action != w.Action || !slices.Equal(g.Fields, w.Fields) {
			t.Errorf("server %d = %+v, want %+v", i, g, w)
		}
	}
	if !slices.Equal(d.NeedsRestart, []string{"listen"}) || !slices.Equal(d.Settings, []string{"pageSize"}) {
		t.Errorf("needsRestart %v settings %v", d.NeedsRestart, d.Settings)
	}
	for _, c := range d.Servers {
		for _, f := range c.Fields {
			if f == "s3cret-value" || f == "Bearer old" {
				t.Fatalf("a secret value in the diff: %v", c)
			}
		}
	}
	for _, c := range Compare(old, old).Servers {
		if c.Action != ActionUnchanged {
			t.Fatalf("a config compared with itself: %+v", c)
		}
	}
}

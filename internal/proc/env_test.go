package proc

import (
	"slices"
	"testing"
)

// Environ drops exactly the variables whose names start with MCPVISOR_.
func TestEnvironDropsMcpvisorVariables(t *testing.T) {
	t.Setenv("MCPVISOR_TOKEN", "secret")
	t.Setenv("MCPVISOR_", "empty-suffix")
	t.Setenv("PROC_TEST_MCPVISOR_INSIDE", "kept")
	t.Setenv("mcpvisor_lower", "kept")
	t.Setenv("PROC_TEST_VALUE", "MCPVISOR_TOKEN=in-a-value")
	env := Environ()
	for _, kv := range []string{"MCPVISOR_TOKEN=secret", "MCPVISOR_=empty-suffix"} {
		if slices.Contains(env, kv) {
			t.Errorf("Environ keeps %s", kv)
		}
	}
	for _, kv := range []string{"PROC_TEST_MCPVISOR_INSIDE=kept", "mcpvisor_lower=kept", "PROC_TEST_VALUE=MCPVISOR_TOKEN=in-a-value"} {
		if !slices.Contains(env, kv) {
			t.Errorf("Environ drops %s", kv)
		}
	}
}

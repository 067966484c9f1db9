//go:build deploycheck

// Package deploy tests mcpvisor's deployment artifacts: the Helm chart
// (helm/mcpvisor: linted, rendered with its default values and with the
// examples', each manifest checked), and on Linux the images
// (docker/: built with podman, inspected, their file systems read
// without running them).
//
// Helm is .deps/tools/helm at the module root (or $MCPVISOR_HELM), with
// chartcheck beside it, built by `make helm` from tools/helm; make test
// starts that build in the background (scripts/test-deps.sh) and the
// tests wait for it, bounded ($MCPVISOR_HELM_WAIT, default 6 minutes:
// from a cold cache the build is three minutes of CPU, at the lowest
// priority beside everything make test runs). The chart's tests are
// parallel, so that they start after TestImages, which needs no Helm.
package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/testserver"
)

// helmWait bounds the wait for a background build of Helm.
const helmWait = 6 * time.Minute

var (
	helmOnce sync.Once
	helmBin  string // helm's path, once found
	helmErr  error
)

// helm returns the path of the helm binary (chartcheck is beside it),
// waiting for a background build of it, bounded.
func helm(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() { helmBin, helmErr = findHelm() })
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmBin
}

func findHelm() (string, error) {
	return testserver.Tool(context.Background(), "helm", moduleRoot(), helmWait, "chartcheck")
}

// moduleRoot is mcpvisor's module root: this package's parent.
func moduleRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("deploy: no caller information to find the module root")
	}
	return filepath.Dir(filepath.Dir(file))
}

// chartDir is the chart's directory; examplesDir its example values'.
func chartDir() string    { return filepath.Join(moduleRoot(), "deploy", "helm", "mcpvisor") }
func examplesDir() string { return filepath.Join(moduleRoot(), "deploy", "helm", "examples") }

// run runs name with args (a timeout of 2 minutes) and returns its
// stdout, and its stderr on failure in the error.
func run(t *testing.T, stdin []byte, name string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Helm's own state (repositories, cache) stays out of the user's home.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config",
		"HELM_DATA_HOME="+home+"/data")
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// manifest is one rendered document: the template it came from and the
// object, as JSON (chartcheck's output).
type manifest struct {
	Source string          `json:"source"`
	Object json.RawMessage `json:"object"`
}

// rendered is a chart's rendered manifests, by kind and name.
type rendered struct {
	docs []manifest
}

// render runs helm template for release in namespace with the values
// files and --set flags given, and converts its output with chartcheck.
func render(t *testing.T, release, namespace string, values []string, set ...string) (*rendered, error) {
	t.Helper()
	h := helm(t)
	args := []string{"template", release, chartDir(), "--namespace", namespace}
	for _, v := range values {
		args = append(args, "--values", v)
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := run(t, nil, h, args...)
	if err != nil {
		return nil, err
	}
	js, err := run(t, out, filepath.Join(filepath.Dir(h), "chartcheck"))
	if err != nil {
		return nil, err
	}
	var docs []manifest
	if err := json.Unmarshal(js, &docs); err != nil {
		return nil, fmt.Errorf("chartcheck's output: %w", err)
	}
	return &rendered{docs: docs}, nil
}

// objects returns the objects of kind, decoded into T.
func objects[T any](t *testing.T, r *rendered, kind string) []T {
	t.Helper()
	var out []T
	for _, d := range r.docs {
		var head struct{ Kind string }
		if err := json.Unmarshal(d.Object, &head); err != nil {
			t.Fatalf("%s: %v", d.Source, err)
		}
		if head.Kind != kind {
			continue
		}
		var o T
		if err := json.Unmarshal(d.Object, &o); err != nil {
			t.Fatalf("%s: decode the %s: %v", d.Source, kind, err)
		}
		out = append(out, o)
	}
	return out
}

// one returns the only object of kind, failing the test unless there is
// exactly one.
func one[T any](t *testing.T, r *rendered, kind string) T {
	t.Helper()
	all := objects[T](t, r, kind)
	if len(all) != 1 {
		t.Fatalf("%d objects of kind %s rendered, want 1", len(all), kind)
	}
	return all[0]
}

// kinds lists the rendered objects' kinds and names.
func (r *rendered) kinds() []string {
	var out []string
	for _, d := range r.docs {
		var head struct {
			Kind     string
			Metadata struct{ Name string }
		}
		_ = json.Unmarshal(d.Object, &head)
		out = append(out, head.Kind+"/"+head.Metadata.Name)
	}
	return out
}

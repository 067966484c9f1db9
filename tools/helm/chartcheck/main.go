// Command chartcheck reads a stream of Kubernetes manifests in YAML (what
// `helm template` prints) on stdin and writes them to stdout as one JSON
// array, for the chart's tests in mcpvisor's module, which read JSON only.
//
// The stream is split into documents as kubectl splits it, and each is
// converted as kubectl converts it (YAML 1.1 to JSON), but strictly: a
// duplicate key, which kubectl would take silently (the last one wins),
// is an error here, as is anything that is not a mapping. Empty documents
// are dropped. Each element is {"source": S, "object": O}, S the template
// the document came from (helm's "# Source:" comment; "" without one).
//
// Exit status: 0, or 1 with the error on stderr.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

type document struct {
	Source string          `json:"source"`
	Object json.RawMessage `json:"object"`
}

func main() {
	docs, err := convert(os.Stdin)
	if err == nil {
		err = json.NewEncoder(os.Stdout).Encode(docs)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chartcheck:", err)
		os.Exit(1)
	}
}

func convert(r io.Reader) ([]document, error) {
	rd := utilyaml.NewYAMLReader(bufio.NewReader(r))
	docs := []document{}
	for n := 1; ; n++ {
		b, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		source := sourceOf(string(b))
		js, err := yaml.YAMLToJSONStrict(b)
		if err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", n, source, err)
		}
		switch s := strings.TrimSpace(string(js)); {
		case s == "null":
			continue // only comments
		case !strings.HasPrefix(s, "{"):
			return nil, fmt.Errorf("document %d (%s): not a mapping: %.80s", n, source, s)
		}
		docs = append(docs, document{Source: source, Object: js})
	}
}

// sourceOf returns the path of helm's "# Source: PATH" comment in doc.
func sourceOf(doc string) string {
	for line := range strings.Lines(doc) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "# Source: "); ok {
			return p
		}
	}
	return ""
}

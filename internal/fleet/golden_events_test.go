package fleet

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// The events' JSON, as /api/events sends it (admin.Entry: the log's id,
// then the event), is kept in testdata/events/<type>.json: every distinct
// shape an event of that type took in this package's tests, with what
// varies from run to run normalised (normalEvent). A test that emits an
// event whose JSON is not there fails the package; -update-events writes
// what this run saw.
var updateEvents = flag.Bool("update-events", false, "write testdata/events from the events this run's tests emitted")

var goldenEvents = struct {
	sync.Mutex
	seen map[string]map[string]bool // type → normalised JSON → seen
}{seen: map[string]map[string]bool{}}

// recordEvent notes e's JSON for the golden check; every test fleet's
// OnEvent calls it.
func recordEvent(e Event) {
	data, err := normalEvent(e)
	if err != nil {
		panic(err)
	}
	goldenEvents.Lock()
	defer goldenEvents.Unlock()
	if goldenEvents.seen[string(e.Type)] == nil {
		goldenEvents.seen[string(e.Type)] = map[string]bool{}
	}
	goldenEvents.seen[string(e.Type)][data] = true
}

var (
	digits  = regexp.MustCompile(`[0-9]+`)
	tmpPath = regexp.MustCompile(`/[^\s"':]*(Test|tmp|go-build)[^\s"':]*`)
)

// normalEvent is e as /api/events sends it, with what varies from run to
// run made constant: the id and times, the session, pids and durations,
// and digits and temporary paths in error text and stderr.
func normalEvent(e Event) (string, error) {
	e.Time = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if e.Session != "" {
		e.Session = "SESSION"
	}
	if e.Details != nil {
		d := map[string]any{}
		for k, v := range e.Details {
			switch {
			case k == "pid" || strings.HasSuffix(k, "Ms") || strings.HasSuffix(k, "Seconds"):
				if _, ok := v.(string); !ok {
					v = 0
				}
			case k == "lastActivity":
				v = "TIME"
			case k == "error" || k == "stderr":
				if s, ok := v.(string); ok {
					v = digits.ReplaceAllString(tmpPath.ReplaceAllString(s, "PATH"), "N")
				}
			}
			d[k] = v
		}
		e.Details = d
	}
	data, err := json.Marshal(struct {
		ID string `json:"id"`
		Event
	}{"EPOCH-1", e})
	if err != nil {
		return "", fmt.Errorf("event %s: %w", e.Type, err)
	}
	return string(data), nil
}

const goldenDir = "testdata/events"

// checkGoldenEvents compares the events this run's tests emitted with
// testdata/events, or writes them there with -update-events.
func checkGoldenEvents() error {
	goldenEvents.Lock()
	defer goldenEvents.Unlock()
	var errs []string
	for typ, seen := range goldenEvents.seen {
		path := filepath.Join(goldenDir, typ+".json")
		got := slices.Sorted(func(yield func(string) bool) {
			for s := range seen {
				if !yield(s) {
					return
				}
			}
		})
		if *updateEvents {
			// Keep what earlier runs saw: a run that emitted fewer shapes
			// (-run) does not forget the others.
			old, _ := readGolden(path)
			for _, s := range old {
				if !seen[s] {
					got = append(got, s)
				}
			}
			slices.Sort(got)
			if err := os.MkdirAll(goldenDir, 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(path, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
				return err
			}
			continue
		}
		want, err := readGolden(path)
		if err != nil {
			errs = append(errs, fmt.Sprintf("event %s: %v (go test -update-events writes it)", typ, err))
			continue
		}
		allowed, err := goldenValues(want)
		if err != nil {
			errs = append(errs, fmt.Sprintf("event %s: %s: %v", typ, path, err))
			continue
		}
		shapes, err := goldenShapes(want)
		if err != nil {
			errs = append(errs, fmt.Sprintf("event %s: %s: %v", typ, path, err))
			continue
		}
		for _, s := range got {
			if bad := unknownValues(s, allowed); len(bad) > 0 {
				errs = append(errs, fmt.Sprintf("event %s: %s not as in %s:\n\t%s", typ, strings.Join(bad, ", "), path, s))
			}
			// A field can be lost as well as changed: the event's set of
			// fields must be one a golden event of its kind has.
			if f, err := fieldsOf(s); err == nil && !shapes[shapeOf(f)] {
				errs = append(errs, fmt.Sprintf("event %s: its fields (%s) are those of no event in %s:\n\t%s", typ, shapeOf(f), path, s))
			}
		}
	}
	slices.Sort(errs)
	if len(errs) > 0 {
		return fmt.Errorf("the events' JSON changed:\n%s", strings.Join(errs, "\n"))
	}
	return nil
}

// An event's fields (and its details', as "details.KEY") with the JSON
// each had in a golden file. Which of a kind's optional fields an event
// has can depend on timing (a stop that raced its start gets an error):
// an event passes when each of its fields has a value some golden event
// of its kind had — error text and stderr only need to be text.
type fieldValues map[string]map[string]bool

func fieldsOf(line string) (map[string]string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &top); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, v := range top {
		if k != "details" {
			out[k] = string(v)
			continue
		}
		var d map[string]json.RawMessage
		if err := json.Unmarshal(v, &d); err != nil {
			return nil, err
		}
		for dk, dv := range d {
			if (dk == "error" || dk == "stderr") && len(dv) > 0 && dv[0] == '"' {
				dv = json.RawMessage(`"TEXT"`)
			}
			out["details."+dk] = string(dv)
		}
	}
	return out, nil
}

func goldenValues(lines []string) (fieldValues, error) {
	fv := fieldValues{}
	for _, l := range lines {
		f, err := fieldsOf(l)
		if err != nil {
			return nil, err
		}
		for k, v := range f {
			if fv[k] == nil {
				fv[k] = map[string]bool{}
			}
			fv[k][v] = true
		}
	}
	return fv, nil
}

// shapeOf is the names of an event's fields, sorted, as one string.
func shapeOf(f map[string]string) string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ",")
}

// goldenShapes are the sets of fields the golden events have.
func goldenShapes(lines []string) (map[string]bool, error) {
	shapes := map[string]bool{}
	for _, l := range lines {
		f, err := fieldsOf(l)
		if err != nil {
			return nil, err
		}
		shapes[shapeOf(f)] = true
	}
	return shapes, nil
}

// unknownValues names line's fields whose value no golden event had.
func unknownValues(line string, fv fieldValues) []string {
	f, err := fieldsOf(line)
	if err != nil {
		return []string{err.Error()}
	}
	var bad []string
	for k, v := range f {
		if !fv[k][v] {
			bad = append(bad, k)
		}
	}
	slices.Sort(bad)
	return bad
}

// readGolden reads a golden file: one event's JSON a line.
func readGolden(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for line := range bytes.Lines(data) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if !json.Valid(line) {
			return nil, fmt.Errorf("%s: not JSON: %s", path, line)
		}
		out = append(out, string(line))
	}
	return out, nil
}

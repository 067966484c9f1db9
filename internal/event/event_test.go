package event

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"
)

// allDetails has one value of every details type.
var allDetails = []Details{
	StartedDetails{}, DormantDetails{}, RespawnedDetails{}, ExitedDetails{},
	RestartedDetails{}, FailedDetails{}, StoppedDetails{}, RestartingDetails{},
	OperatorStopDetails{}, OperatorRestartDetails{}, ReloadDrainedDetails{},
	DefinitionsChangedDetails{}, DefinitionsApprovedDetails{}, ToolsLostDetails{},
	ToolsLostAcceptedDetails{}, ToolsRestoredDetails{},
	NeedsLoginDetails{}, LoggedInDetails{}, LoggedOutDetails{}, ReloadedDetails{}, ReloadRejectedDetails{},
}

// detailsOf returns the details type of kind k.
func detailsOf(t *testing.T, k Kind) reflect.Type {
	t.Helper()
	for _, d := range allDetails {
		if d.Kind() == k {
			return reflect.TypeOf(d)
		}
	}
	t.Fatalf("kind %q has no details type", k)
	return nil
}

func TestEveryKindHasOneDetailsType(t *testing.T) {
	seen := map[Kind]int{}
	for _, d := range allDetails {
		seen[d.Kind()]++
	}
	for _, k := range Kinds() {
		if seen[k] != 1 {
			t.Errorf("kind %q: %d details types, want 1", k, seen[k])
		}
		delete(seen, k)
	}
	for k := range seen {
		t.Errorf("details type of kind %q, which Kinds does not list", k)
	}
	if n := len(slices.Compact(slices.Sorted(slices.Values(Kinds())))); n != len(Kinds()) {
		t.Errorf("Kinds lists a kind more than once: %v", Kinds())
	}
}

func TestFields(t *testing.T) {
	code := 0
	got := Fields(ExitedDetails{Error: "boom", Code: &code, Stderr: []string{}})
	want := map[string]any{"error": "boom", "stage": "", "code": 0}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Fields(exited) = %#v, want %#v", got, want)
	}
	got = Fields(ReloadDrainedDetails{Drain: Drain{Instances: 2}, Reason: "removed"})
	want = map[string]any{"instances": 2, "reason": "removed"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Fields(reload-drained) = %#v, want %#v", got, want)
	}
	ms := 1.5
	got = Fields(StoppedDetails{StopMs: &ms})
	want = map[string]any{"stopMs": 1.5}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Fields(stopped) = %#v, want %#v", got, want)
	}
}

// TestFieldsEncodeAsJSON: an event's details (Fields) have the JSON that
// encoding/json gives its details value — the details types are what
// the events say, key for key.
func TestFieldsEncodeAsJSON(t *testing.T) {
	code, ms := 3, 2.5
	for _, d := range []Details{
		ExitedDetails{Error: "e", Stage: "serving", PID: 7, Code: &code, Signal: "SIGKILL", ExitKind: "oom", OOMKills: 1, MemoryLimitBytes: 1 << 20, PIDsLimitHits: 2, StopStep: "term", Stderr: []string{"a"}},
		StoppedDetails{StopMs: &ms, Reason: "shutdown"},
		DormantDetails{PID: 1, IdleSeconds: 3, LastActivity: time.Unix(5, 0).UTC(), By: "operator"},
		ReloadDrainedDetails{Drain: Drain{Instances: 1, Cut: 1}, Reason: "relaunched"},
		DefinitionsChangedDetails{Added: []DefinitionRef{{"tool", "a"}}, Removed: []DefinitionRef{}, Changed: []ChangedDefinition{}, Held: []string{}},
		ReloadRejectedDetails{Trigger: "api", Error: "bad", Problems: []ReloadProblem{{Path: "x", Message: "y"}}},
	} {
		a, err := json.Marshal(Fields(d))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(d)
		if !jsonEqual(t, a, b) {
			t.Errorf("%s: Fields gives %s, the type %s", d.Kind(), a, b)
		}
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

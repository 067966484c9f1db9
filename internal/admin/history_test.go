package admin

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/store"
)

// run is one run of mcpvisor as far as the event history goes: a store,
// its writer, and a log restored from it and persisting to it.
type run struct {
	st  *store.Store
	w   *store.EventWriter
	log *EventLog
}

func startRun(t *testing.T, path string, max int) *run {
	t.Helper()
	st, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &run{st: st, w: st.EventWriter(store.EventWriterOptions{})}
	r.log = RestoreEventLog(max, st.Events(time.Time{}, max))
	r.log.PersistTo(r.w.Record)
	return r
}

func (r *run) stop(t *testing.T) {
	t.Helper()
	r.log.Close()
	if err := r.w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.st.Close(); err != nil {
		t.Fatal(err)
	}
}

func epochOf(id string) string {
	epoch, _, _ := strings.Cut(id, "-")
	return epoch
}

func ids(es []Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

// Events of an earlier run are replayed after a restart, with the ids
// they had; this run's ids differ from theirs, and a client that saw one
// of them resumes after it.
func TestEventHistoryAcrossRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	first := startRun(t, path, 10)
	first.log.Add(fleet.Event{Server: "a", Type: "started"})
	first.log.Add(fleet.Event{Server: "a", Session: "s1", Type: "dormant", Details: map[string]any{"idle": 3}})
	before := first.log.Events()
	first.stop(t)

	second := startRun(t, path, 10)
	defer second.stop(t)
	kept := second.log.Events()
	if strings.Join(ids(kept), " ") != strings.Join(ids(before), " ") || kept[1].Type != "dormant" || kept[1].Session != "s1" ||
		kept[1].Details["idle"] != json.Number("3") || !kept[1].Time.Equal(before[1].Time) {
		t.Fatalf("restored %+v, want %+v", kept, before)
	}
	if second.log.counted()[eventKey{"a", "dormant"}] != 0 {
		t.Fatal("restored events are counted as this run's")
	}
	second.log.Add(fleet.Event{Server: "b", Type: "started"})
	all := second.log.Events()
	if len(all) != 3 || all[2].ID == before[0].ID || all[2].ID == before[1].ID || epochOf(all[2].ID) == epochOf(before[0].ID) {
		t.Fatalf("ids %v: this run's must differ from the earlier run's", ids(all))
	}

	// Resuming after an earlier run's event it still keeps.
	replay, _, _, cancel, err := second.log.Subscribe(before[0].ID, 4)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if got := strings.Join(ids(replay), " "); got != all[1].ID+" "+all[2].ID {
		t.Fatalf("resumed after %s: %s", before[0].ID, got)
	}
	// After this run's last: nothing.
	replay, _, _, cancel, _ = second.log.Subscribe(all[2].ID, 4)
	cancel()
	if len(replay) != 0 {
		t.Fatalf("resumed after the last: %v", ids(replay))
	}

	// /api/events and its stream carry the earlier run's events too.
	srv := httptest.NewServer(New(testFleet(t), second.log, Options{}))
	defer srv.Close()
	var list struct{ Events []Entry }
	if err := json.NewDecoder(get(t, srv.URL+"/api/events").Body).Decode(&list); err != nil || len(list.Events) != 3 || list.Events[0].ID != before[0].ID {
		t.Fatalf("list %+v %v", list, err)
	}
	s := stream(t, srv.URL+"/api/events?follow")
	for _, want := range all {
		if e := s.next(); e.id != want.ID || e.event != string(want.Type) {
			t.Fatalf("stream replayed %+v, want %s %s", e, want.ID, want.Type)
		}
	}

	// A third run keeps the newest max of all.
	second.log.Add(fleet.Event{Server: "b", Type: "dormant"})
	second.stop(t)
	third := startRun(t, path, 2)
	defer third.stop(t)
	if got := third.log.Events(); len(got) != 2 || got[1].Type != "dormant" || got[1].Server != "b" {
		t.Fatalf("third run kept %+v", got)
	}
}

// Events persisted without an id (by an older mcpvisor) get one naming
// their place in the history.
func TestEventHistoryWithoutIDs(t *testing.T) {
	log := RestoreEventLog(10, []store.Event{{Seq: 7, Type: "started"}, {Seq: 8, Type: "exited", Details: json.RawMessage(`[1]`)}})
	got := log.Events()
	if len(got) != 2 || got[0].ID != "s-7" || got[1].ID != "s-8" || got[1].Details != nil {
		t.Fatalf("restored %+v", got)
	}
	if _, err := parseEventID(got[0].ID); err != nil {
		t.Fatal(err)
	}
}

// A run whose clock reads what an earlier run's did still names its
// events apart.
func TestEventHistoryEpochClash(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	defer func(c func() time.Time) { epochClock = c }(epochClock)
	epochClock = func() time.Time { return t0 }
	clash := strconv.FormatInt(t0.UnixNano(), 36)
	log := RestoreEventLog(10, []store.Event{{Seq: 1, ID: clash + "-1", Type: "started"}})
	log.Add(fleet.Event{Server: "a", Type: "exited"})
	got := log.Events()
	if len(got) != 2 || epochOf(got[1].ID) == clash {
		t.Fatalf("ids %v: the new run reuses the earlier run's epoch", ids(got))
	}
	replay, _, _, cancel, _ := log.Subscribe(got[0].ID, 2)
	cancel()
	if len(replay) != 1 || replay[0].ID != got[1].ID {
		t.Fatalf("resumed after the earlier run's event: %v", ids(replay))
	}
}

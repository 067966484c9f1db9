package main

import "testing"

var trimSink []byte

// A trim after requests is worth it once they allocated trimWorth since
// the last one that was, and not again until they allocate as much more.
func TestTrimWorthIt(t *testing.T) {
	trimSink = make([]byte, 2*trimWorth)
	trimSink = nil
	if !trimWorthIt() {
		t.Fatalf("%d bytes allocated since the last trim are not worth one", 2*trimWorth)
	}
	if trimWorthIt() {
		t.Fatal("a second trim is worth it right after the first, with nothing allocated between")
	}
	trimSink = make([]byte, 2*trimWorth)
	trimSink = nil
	if !trimWorthIt() {
		t.Fatal("a trim after as much again is not worth it")
	}
}

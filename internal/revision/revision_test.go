package revision

import (
	"encoding/json"
	"slices"
	"testing"
)

// Every member of the table is where its definition puts it, of one era,
// and named once per place and method.
func TestTableIsWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range Members {
		if m.Name == "" || m.Def == "" {
			t.Errorf("%+v: a member has a name and the definition it comes from", m)
		}
		methods := m.Methods
		if methods == nil {
			methods = []string{"*"}
		}
		for _, method := range methods {
			k := string(rune('0'+m.Place)) + method + " " + m.Name
			if seen[k] {
				t.Errorf("%s is in the table twice", k)
			}
			seen[k] = true
		}
	}
	for _, m := range Methods {
		if Has(m.Era, m.Method) == Has(1-m.Era, m.Method) {
			t.Errorf("%s: both eras or neither", m.Method)
		}
	}
	if !Has(Modern, "tools/call") || !Has(Legacy, "tools/call") {
		t.Error("a method the table does not name is in both eras")
	}
}

// ToLegacyResult leaves out exactly the modern members of the method's
// results, and a _meta with nothing else; the rest stays byte for byte.
func TestToLegacyResult(t *testing.T) {
	for _, tc := range []struct{ method, in, want string }{
		{"tools/call", `{"content":[],"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s"}}}`, `{"content":[]}`},
		{"tools/call", `{"content":[],"_meta":{"io.modelcontextprotocol/serverInfo":{},"com.example/k":1}}`, `{"content":[],"_meta":{"com.example/k":1}}`},
		// ttlMs and cacheScope are members of a cacheable method's results
		// alone: in another's they are the server's own, and stay.
		{"tools/list", `{"tools":[],"resultType":"complete","ttlMs":0,"cacheScope":"public"}`, `{"tools":[]}`},
		{"tools/call", `{"content":[],"ttlMs":5}`, `{"content":[],"ttlMs":5}`},
		{"resources/read", `{"contents":[],"ttlMs":5,"cacheScope":"private","resultType":"complete"}`, `{"contents":[]}`},
		{"completion/complete", `{"completion":{"values":[]},"resultType":"complete"}`, `{"completion":{"values":[]}}`},
		// Nested members of those names are the result's own.
		{"tools/call", `{"structuredContent":{"resultType":"x"}}`, `{"structuredContent":{"resultType":"x"}}`},
		// An input_required result is fulfilled, not translated.
		{"tools/call", `{"resultType":"input_required","inputRequests":{}}`, `{"resultType":"input_required","inputRequests":{}}`},
		{"tools/call", `[1]`, `[1]`},
	} {
		if got := ToLegacyResult(tc.method, json.RawMessage(tc.in)); string(got) != tc.want {
			t.Errorf("ToLegacyResult(%s, %s) = %s, want %s", tc.method, tc.in, got, tc.want)
		}
	}
}

// ToModernResult adds what the modern era requires and the result lacks,
// and leaves what it has.
func TestToModernResult(t *testing.T) {
	for _, tc := range []struct{ method, in, want string }{
		{"tools/call", `{"content":[]}`, `{"resultType":"complete","content":[]}`},
		{"tools/list", `{"tools":[]}`, `{"resultType":"complete","ttlMs":60,"cacheScope":"public","tools":[]}`},
		{"tools/list", `{"tools":[],"ttlMs":5}`, `{"resultType":"complete","cacheScope":"public","tools":[],"ttlMs":5}`},
		{"tools/call", `{"resultType":"complete","content":[]}`, `{"resultType":"complete","content":[]}`},
		{"tools/call", `{"inputRequests":{}}`, `{"resultType":"input_required","inputRequests":{}}`},
		{"tools/call", `{"resultType":"task"}`, `{"resultType":"task"}`},
		{"tools/call", `{}`, `{"resultType":"complete"}`},
		{"tools/call", `"x"`, `"x"`},
	} {
		if got := ToModernResult(tc.method, json.RawMessage(tc.in), 60, `"public"`); string(got) != tc.want {
			t.Errorf("ToModernResult(%s, %s) = %s, want %s", tc.method, tc.in, got, tc.want)
		}
	}
}

// The skills extension's results get ttlMs and cacheScope for a modern
// client, and keep them for a legacy one: only resultType, which the
// extension's results do not define, is the modern era's alone.
func TestExtensionCacheable(t *testing.T) {
	for _, method := range ExtensionCacheableMethods {
		if !Cacheable(method) {
			t.Errorf("%s is not cacheable", method)
		}
		if got, want := string(ToModernResult(method, json.RawMessage(`{"skills":[]}`), 0, `"public"`)), `{"resultType":"complete","ttlMs":0,"cacheScope":"public","skills":[]}`; got != want {
			t.Errorf("ToModernResult(%s) = %s, want %s", method, got, want)
		}
		in := `{"resultType":"complete","ttlMs":30000,"cacheScope":"private","skill":{}}`
		if got, want := string(ToLegacyResult(method, json.RawMessage(in))), `{"ttlMs":30000,"cacheScope":"private","skill":{}}`; got != want {
			t.Errorf("ToLegacyResult(%s) = %s, want %s", method, got, want)
		}
	}
	if Cacheable("skills/other") {
		t.Error("skills/other is cacheable")
	}
}

// A round trip: a legacy result made modern and back is what it was.
func TestRoundTrip(t *testing.T) {
	for _, method := range append(slices.Clone(CacheableMethods), "tools/call", "prompts/get", "completion/complete") {
		in := `{"a":[1,{"b":2}],"_meta":{"k":"v"}}`
		if got := ToLegacyResult(method, ToModernResult(method, json.RawMessage(in), 0, `"private"`)); string(got) != in {
			t.Errorf("%s: %s became %s", method, in, got)
		}
	}
}

// A server's notification loses the subscription id of mcpvisor's own
// listen, and nothing else.
func TestNotification(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"uri":"u","_meta":{"io.modelcontextprotocol/subscriptionId":7}}`, `{"uri":"u"}`},
		{`{"progress":1,"_meta":{"io.modelcontextprotocol/subscriptionId":"s","k":1}}`, `{"progress":1,"_meta":{"k":1}}`},
		{`{"progress":1}`, `{"progress":1}`},
		{``, ``},
	} {
		if got := Notification(json.RawMessage(tc.in)); string(got) != tc.want {
			t.Errorf("Notification(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// A legacy client's answer loses the _meta the modern era does not give
// the answers of roots and elicitation; sampling's keeps it.
func TestToModernClientResult(t *testing.T) {
	for _, tc := range []struct{ method, in, want string }{
		{"roots/list", `{"roots":[],"_meta":{"k":1}}`, `{"roots":[]}`},
		{"elicitation/create", `{"action":"accept","_meta":{}}`, `{"action":"accept"}`},
		{"sampling/createMessage", `{"role":"assistant","_meta":{"k":1}}`, `{"role":"assistant","_meta":{"k":1}}`},
	} {
		if got := ToModernClientResult(tc.method, json.RawMessage(tc.in)); string(got) != tc.want {
			t.Errorf("ToModernClientResult(%s, %s) = %s, want %s", tc.method, tc.in, got, tc.want)
		}
	}
}

// The table as read off the two schemas, written out: a member dropped
// from Members by mistake (which every test that reads the table would
// then stop looking for) fails here.
func TestTableIsTheSchemasDifference(t *testing.T) {
	want := []string{
		"modern result resultType", "modern result ttlMs", "modern result cacheScope",
		"modern result inputRequests", "modern result requestState",
		"modern result._meta io.modelcontextprotocol/serverInfo",
		"modern notification._meta io.modelcontextprotocol/subscriptionId",
		"modern request inputResponses", "modern request requestState", "legacy request task",
		"modern request._meta io.modelcontextprotocol/protocolVersion", "modern request._meta io.modelcontextprotocol/clientCapabilities",
		"modern request._meta io.modelcontextprotocol/clientInfo", "modern request._meta io.modelcontextprotocol/logLevel",
		"legacy client result _meta",
	}
	places := map[Place]string{InResult: "result", InResultMeta: "result._meta", InNotificationMeta: "notification._meta",
		InRequest: "request", InRequestMeta: "request._meta", InClientResult: "client result"}
	var got []string
	for _, m := range Members {
		era := "legacy"
		if m.Era == Modern {
			era = "modern"
		}
		got = append(got, era+" "+places[m.Place]+" "+m.Name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the table has\n%q\nwant\n%q", got, want)
	}
	if !Cacheable("tools/list") || !Cacheable("resources/read") || Cacheable("tools/call") || len(CacheableMethods) != 6 {
		t.Errorf("cacheable methods %v", CacheableMethods)
	}
	var methods []string
	for _, m := range Methods {
		methods = append(methods, m.Era.String()+" "+m.Method)
	}
	wantMethods := []string{"legacy initialize", "legacy ping", "legacy logging/setLevel", "legacy resources/subscribe", "legacy resources/unsubscribe",
		"legacy notifications/initialized", "legacy notifications/roots/list_changed", "legacy notifications/elicitation/complete",
		"2026-07-28 server/discover", "2026-07-28 subscriptions/listen", "2026-07-28 notifications/subscriptions/acknowledged"}
	slices.Sort(methods)
	slices.Sort(wantMethods)
	if !slices.Equal(methods, wantMethods) {
		t.Errorf("the methods of one era: %q, want %q", methods, wantMethods)
	}
}

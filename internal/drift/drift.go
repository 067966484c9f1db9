// Package drift fingerprints the definitions an MCP server gives of its
// tools, prompts and resource templates, and says what changed between
// two lists of them.
//
// A definition is the part of an item that decides how a client uses it:
//
//	tool              name, title, description, inputSchema, outputSchema, annotations
//	prompt            name, title, description, arguments
//	resourceTemplate  uriTemplate, name, title, description, mimeType
//
// Anything else an item carries (_meta, icons, fields of later protocol
// revisions) is not part of its definition: a change there is no drift.
//
// Canonical form: those fields only, as JSON with object keys sorted,
// no insignificant whitespace, strings re-encoded the one way Go's
// encoder writes them, numbers in their shortest form (1, 1.0 and 1e0
// are the same number), and a member whose value is null the same as an
// absent one. Two items that mean the same thing have the same canonical
// form and so the same Fingerprint, whatever their key order, spacing or
// escapes.
package drift

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// Kind is a kind of definition, as events and the API name it.
type Kind string

const (
	Tool             Kind = "tool"
	Prompt           Kind = "prompt"
	ResourceTemplate Kind = "resourceTemplate"
)

// Kinds are every kind, in the order diffs list them.
var Kinds = []Kind{Tool, Prompt, ResourceTemplate}

// fields are the members that define an item of each kind.
var fields = map[Kind][]string{
	Tool:             {"name", "title", "description", "inputSchema", "outputSchema", "annotations"},
	Prompt:           {"name", "title", "description", "arguments"},
	ResourceTemplate: {"uriTemplate", "name", "title", "description", "mimeType"},
}

// keyField is the member that names an item of kind k in its list.
func keyField(k Kind) string {
	if k == ResourceTemplate {
		return "uriTemplate"
	}
	return "name"
}

// ErrNotObject is wrapped by the error for an item that is not a JSON
// object with a string key (name, or uriTemplate for a template).
var ErrNotObject = errors.New("not a JSON object with a name")

// Def is one item's definition in canonical form.
type Def struct {
	Kind Kind
	// Key is the item's name (a template's uriTemplate).
	Key string
	// Canonical is the canonical JSON of the defining fields.
	Canonical json.RawMessage
	// Fingerprint is the hex SHA-256 of Canonical.
	Fingerprint string
}

// Define reads the definition of one item of kind k.
func Define(k Kind, item json.RawMessage) (Def, error) {
	want, ok := fields[k]
	if !ok {
		return Def{}, fmt.Errorf("drift: unknown kind %q", k)
	}
	// The item is read once, whole (its members as maps, slices and
	// canonical numbers), and its defining members taken from it.
	if !json.Valid(item) {
		return Def{}, fmt.Errorf("drift: %s: %w", k, ErrNotObject)
	}
	v, err := decodeRaw(item)
	obj, _ := v.(map[string]any)
	if err != nil || obj == nil {
		return Def{}, fmt.Errorf("drift: %s: %w", k, ErrNotObject)
	}
	key, _ := obj[keyField(k)].(string)
	if key == "" {
		return Def{}, fmt.Errorf("drift: %s: %w", k, ErrNotObject)
	}
	def := make(map[string]any, len(want))
	for _, f := range want {
		if v := obj[f]; v != nil {
			def[f] = normalize(v)
		}
	}
	// Kept as long as the definition is known: its own exact-size copy,
	// not the encoder's buffer with the room it grew.
	canon := bytes.Clone(encode(def))
	sum := sha256.Sum256(canon)
	return Def{Kind: k, Key: key, Canonical: canon, Fingerprint: hex.EncodeToString(sum[:])}, nil
}

// Canonical is the canonical form of any JSON value (not only a
// definition): the same rules, applied to the whole value.
func Canonical(raw json.RawMessage) (json.RawMessage, error) {
	v, err := decode(raw)
	if err != nil {
		return nil, err
	}
	return encode(v), nil
}

// number is a JSON number in canonical text.
type number string

// decode reads one JSON value into maps, slices, strings, bools, numbers
// (canonical text) and nil, dropping null members of objects.
func decode(raw json.RawMessage) (any, error) {
	v, err := decodeRaw(raw)
	if err != nil {
		return nil, err
	}
	return normalize(v), nil
}

// decodeRaw reads one JSON value into maps, slices, strings, bools,
// json.Numbers and nil, as it is written.
func decodeRaw(raw json.RawMessage) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err == nil {
		return nil, errors.New("trailing data after a JSON value")
	}
	return v, nil
}

func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e == nil {
				delete(x, k)
				continue
			}
			x[k] = normalize(e)
		}
		return x
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
		return x
	case json.Number:
		return canonicalNumber(string(x))
	}
	return v
}

// canonicalNumber writes a JSON number in one form: an integer of up to
// about 300 digits as its digits (without a leading zero or minus zero),
// any other number as the shortest decimal that reads back as the same
// 1024-bit binary value (so 1, 1.0, 1e0 and 10e-1 are one number, and
// 0.1 stays 0.1). A number whose decimal exponent is beyond ±maxExp, or
// written with more than maxNumberLen characters, is kept as written:
// reading it as a 1024-bit value costs time that grows with its exponent
// (seconds for 9e2547409), and no definition needs one.
func canonicalNumber(s string) number {
	if plainInteger(s) {
		return number(s) // its own canonical form
	}
	return bigNumber(s)
}

// Bounds of the numbers canonicalNumber reads as values.
const (
	maxExp       = 10000
	maxNumberLen = 1100
)

// bigNumber is canonicalNumber of any number.
func bigNumber(s string) number {
	if len(s) > maxNumberLen || hugeExponent(s) {
		return number(s)
	}
	f, _, err := big.ParseFloat(s, 10, 1024, big.ToNearestEven)
	if err != nil {
		return number(s)
	}
	if f.Sign() == 0 {
		return "0"
	}
	if f.IsInt() && f.MantExp(nil) <= 1024 {
		i, _ := f.Int(nil)
		return number(i.String())
	}
	return number(f.Text('g', -1))
}

// hugeExponent reports whether the JSON number s has an exponent beyond
// ±maxExp.
func hugeExponent(s string) bool {
	i := strings.IndexAny(s, "eE")
	if i < 0 {
		return false
	}
	e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
	return err != nil || e > maxExp || e < -maxExp
}

// plainInteger reports whether s is an integer of at most 15 digits
// written canonically already: no leading zero, no minus zero, no
// fraction or exponent. Most numbers of a definition are.
func plainInteger(s string) bool {
	digits := strings.TrimPrefix(s, "-")
	if len(digits) == 0 || len(digits) > 15 || (digits[0] == '0' && len(s) > 1) {
		return false
	}
	for i := range len(digits) {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	return true
}

// encode writes v canonically: keys sorted (by their UTF-8 bytes), no
// whitespace.
func encode(v any) []byte {
	var b bytes.Buffer
	write(&b, v)
	return b.Bytes()
}

func write(b *bytes.Buffer, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case number:
		b.WriteString(string(x))
	case string:
		writeString(b, x)
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			write(b, e)
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, k)
			b.WriteByte(':')
			write(b, x[k])
		}
		b.WriteByte('}')
	default:
		panic(fmt.Sprintf("drift: cannot encode %T", v))
	}
}

func writeString(b *bytes.Buffer, s string) {
	if plainString(s) {
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
		return
	}
	var sb bytes.Buffer
	e := json.NewEncoder(&sb)
	e.SetEscapeHTML(false)
	_ = e.Encode(s)
	b.Write(bytes.TrimSuffix(sb.Bytes(), []byte("\n")))
}

// Set is a list's definitions by key. An item that is not an object with
// a key is left out (it defines nothing a client could call); of two
// items with one key the last counts, as a client indexing by name would.
type Set map[string]Def

// Index reads the definitions of a list of items of kind k.
func Index(k Kind, items []json.RawMessage) Set {
	s := make(Set, len(items))
	for _, it := range items {
		if d, err := Define(k, it); err == nil {
			s[d.Key] = d
		}
	}
	return s
}

// Change is what happened to one definition.
type Change struct {
	Kind Kind   `json:"kind"`
	Name string `json:"name"`
	// Change is "added", "removed" or "changed".
	Change string `json:"change"`
	// Fields are the changed fields of a changed definition, by path.
	Fields []Field `json:"fields,omitempty"`
	// More counts the changed fields left out past MaxFields.
	More int `json:"more,omitempty"`
}

// Paths are the paths of c's changed fields.
func (c Change) Paths() []string {
	out := make([]string, len(c.Fields))
	for i, f := range c.Fields {
		out[i] = f.Path
	}
	return out
}

// Field is one changed value of a definition: its path (members joined
// by ".", a member that is not a plain identifier quoted in brackets:
// inputSchema.properties["a.b"]) and its value before and after, absent
// on the side where it did not exist. Values are quoted whole up to
// MaxValue bytes of JSON; a longer one is cut: it is then a JSON string
// of the start of its JSON text, and Truncated says so, with its whole
// length.
type Field struct {
	Path string          `json:"path"`
	Old  json.RawMessage `json:"old,omitempty"`
	New  json.RawMessage `json:"new,omitempty"`
	// Truncated is set when Old or New was cut.
	Truncated *Truncated `json:"truncated,omitempty"`
}

// Truncated gives the whole length, in bytes of canonical JSON, of each
// value of a Field that was cut (0: that side is whole).
type Truncated struct {
	Old int `json:"old,omitempty"`
	New int `json:"new,omitempty"`
}

// Bounds of a diff.
const (
	// MaxValue is the longest value (its canonical JSON, in bytes) a
	// Field quotes whole: generous, so that what an operator reviews —
	// a long description included — is what the server sent.
	MaxValue = 64 << 10
	// MaxFields is how many changed fields one Change lists.
	MaxFields = 32
)

// Added and so on are the values of Change.Change.
const (
	Added   = "added"
	Removed = "removed"
	Changed = "changed"
)

// Diff lists what changed from old to new, sorted by key: definitions
// added, removed, and changed with their changed fields. Equal sets give
// nothing.
func Diff(old, new Set) []Change {
	var out []Change
	for key, n := range new {
		o, ok := old[key]
		switch {
		case !ok:
			out = append(out, Describe(n))
		case o.Fingerprint != n.Fingerprint:
			out = append(out, Compare(o, n))
		}
	}
	for key, o := range old {
		if _, ok := new[key]; !ok {
			out = append(out, Change{Kind: o.Kind, Name: key, Change: Removed})
		}
	}
	slices.SortFunc(out, func(a, b Change) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Compare is the change from o to n, two definitions of one key.
func Compare(o, n Def) Change {
	c := Change{Kind: n.Kind, Name: n.Key, Change: Changed}
	ov, _ := decode(o.Canonical)
	nv, _ := decode(n.Canonical)
	var all []Field
	diffValue("", ov, nv, &all)
	if len(all) > MaxFields {
		c.More = len(all) - MaxFields
		all = all[:MaxFields]
	}
	c.Fields = all
	return c
}

// Describe is the addition of definition d, shown whole: a field for
// each of its defining members but its key (name, or a template's
// uriTemplate), in canonical order, each with its whole value as New.
func Describe(d Def) Change {
	c := Change{Kind: d.Kind, Name: d.Key, Change: Added}
	v, _ := decode(d.Canonical)
	m, _ := v.(map[string]any)
	keys := make([]string, 0, len(m))
	for k := range m {
		if k != keyField(d.Kind) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		f := Field{Path: join("", k)}
		var whole int
		if f.New, whole = bound(encode(m[k])); whole > 0 {
			f.Truncated = &Truncated{New: whole}
		}
		c.Fields = append(c.Fields, f)
	}
	return c
}

// diffValue appends the differences between a and b (nil: absent) under
// path. Objects are compared member by member; anything else, arrays
// included, as a whole.
func diffValue(path string, a, b any, out *[]Field) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		slices.Sort(sorted)
		for _, k := range sorted {
			diffValue(join(path, k), am[k], bm[k], out)
		}
		return
	}
	var ea, eb []byte
	if a != nil {
		ea = encode(a)
	}
	if b != nil {
		eb = encode(b)
	}
	if bytes.Equal(ea, eb) {
		return
	}
	f := Field{Path: path}
	var t Truncated
	f.Old, t.Old = bound(ea)
	f.New, t.New = bound(eb)
	if t != (Truncated{}) {
		f.Truncated = &t
	}
	*out = append(*out, f)
}

func join(path, key string) string {
	if !plain(key) {
		var b bytes.Buffer
		writeString(&b, key)
		return path + "[" + b.String() + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func plain(key string) bool {
	if key == "" {
		return false
	}
	for i, r := range key {
		switch {
		case r == '_' || r == '$' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'):
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// bound is v, or, past MaxValue, a JSON string of its first MaxValue
// bytes or less (cut at a character's start); whole is v's length when
// it was cut, else 0.
func bound(v []byte) (out json.RawMessage, whole int) {
	if len(v) <= MaxValue {
		return v, 0
	}
	cut := MaxValue
	for cut > 0 && !utf8Start(v[cut]) {
		cut--
	}
	var b bytes.Buffer
	writeString(&b, string(v[:cut]))
	return b.Bytes(), len(v)
}

func utf8Start(c byte) bool { return c&0xC0 != 0x80 }

// plainString reports whether s is printable ASCII with no quote or
// backslash: what encoding/json writes as it is, between quotes.
func plainString(s string) bool {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

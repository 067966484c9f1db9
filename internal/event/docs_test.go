package event

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// jsonNames are the JSON names of a details type's fields, those of an
// embedded struct included.
func jsonNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonNames(f.Type)...)
			continue
		}
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// TestDocsDescribeEveryKind: docs/events.md has a section for every kind
// ("## `kind`"), and none for another; each section names every detail
// field of its kind (as "`name`").
func TestDocsDescribeEveryKind(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "events.md"))
	if err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile("(?m)^## `([^`]+)`\\s*$")
	sections := map[Kind]string{}
	idx := heading.FindAllSubmatchIndex(data, -1)
	for i, m := range idx {
		end := len(data)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		sections[Kind(data[m[2]:m[3]])] = string(data[m[1]:end])
	}
	for _, k := range Kinds() {
		sec, ok := sections[k]
		if !ok {
			t.Errorf("docs/events.md: no section \"## `%s`\"", k)
			continue
		}
		delete(sections, k)
		for _, name := range jsonNames(detailsOf(t, k)) {
			if !strings.Contains(sec, "`"+name+"`") {
				t.Errorf("docs/events.md, %s: detail field `%s` not described", k, name)
			}
		}
	}
	for k := range sections {
		t.Errorf("docs/events.md: section for %q, which is not a declared kind", k)
	}
}

package clientcfg

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/mcpvisor/mcpvisor/internal/jsonc"
)

// serverTexts are the server entries of a file: each one's text as
// written, and its value made comparable (comments and layout aside).
type serverTexts struct {
	text, norm map[string]string
}

// entries reads the server entries of a file of format f (nil: none).
func entries(data []byte, f Format) (*serverTexts, error) {
	st := &serverTexts{text: map[string]string{}, norm: map[string]string{}}
	if data == nil {
		return st, nil
	}
	if f == FormatCodex {
		l, err := layoutCodex(data)
		if err != nil {
			return nil, err
		}
		for name, spans := range l.tables {
			var b []byte
			for i, s := range spans {
				if i > 0 && onlyBlanks(data[spans[i-1].end:s.start]) {
					b = append(b, data[spans[i-1].end:s.start]...) // the blank lines between a table and its sub-table
				}
				b = append(b, data[s.start:s.end]...)
			}
			st.text[name] = string(b)
			st.norm[name] = string(bytes.Join(bytes.Fields(b), []byte(" ")))
		}
		for name := range l.other {
			st.norm[name] = "\x00other" // written as dotted keys: never spliced
		}
		return st, nil
	}
	root, err := jsonc.Parse(data)
	if err != nil {
		return nil, err
	}
	obj := root.Get(f.serversKey())
	if obj == nil || obj.Kind != jsonc.Object {
		return st, nil
	}
	for _, m := range obj.Members {
		raw := data[m.Value.Start:m.Value.End]
		var c bytes.Buffer
		if err := json.Compact(&c, jsonc.Standardize(raw)); err != nil {
			return nil, err
		}
		st.text[m.Key], st.norm[m.Key] = string(raw), c.String()
	}
	return st, nil
}

// onlyBlanks reports whether TOML text holds only blank and comment lines.
func onlyBlanks(b []byte) bool {
	for _, line := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			return false
		}
	}
	return true
}

// PlanUninstall works out what uninstall-client makes of a client's file
// that changed since install-client turned orig (nil: there was no
// file) into installed: cur with the server entries install-client
// changed put back as orig had them (or removed, when orig had none),
// every other byte as it is now — what the client or the user wrote
// since stays. Conflicts are the entries install-client changed that
// changed again since, each with its path: without force out is nil
// then; with force they too are put back as they were.
func (c *Client) PlanUninstall(orig, installed, cur []byte, f Format, force bool) (out []byte, conflicts []string, err error) {
	o, err := entries(orig, f)
	if err != nil {
		return nil, nil, fmt.Errorf("the copy of the file: %w", err)
	}
	in, err := entries(installed, f)
	if err != nil {
		return nil, nil, err
	}
	now, err := entries(cur, f)
	if err != nil {
		return nil, nil, err
	}
	var touched []string
	for _, m := range []map[string]string{o.norm, in.norm} {
		for name := range m {
			_, o1 := o.norm[name]
			_, i1 := in.norm[name]
			if (o1 != i1 || o.norm[name] != in.norm[name]) && !slices.Contains(touched, name) {
				touched = append(touched, name)
			}
		}
	}
	slices.Sort(touched)
	key := f.serversKey()
	for _, name := range touched {
		nv, nowHas := now.norm[name]
		iv, inHas := in.norm[name]
		if nowHas != inHas || nv != iv {
			conflicts = append(conflicts, join(key, name))
		}
	}
	if len(conflicts) > 0 && !force {
		return nil, conflicts, nil
	}
	out = cur
	for _, name := range touched {
		text, had := o.text[name]
		if o.norm[name] == "\x00other" || now.norm[name] == "\x00other" {
			return nil, conflicts, fmt.Errorf("%s is written as dotted keys or an inline table; put it back by hand", join(key, name))
		}
		switch {
		case f == FormatCodex:
			out, err = codexReplace(out, name, text)
		case had:
			out, err = jsonc.SetMember(out, []string{key}, name, jsonc.Raw(text))
		default:
			out, err = jsonc.RemoveMember(out, []string{key}, name)
		}
		if err != nil {
			return nil, conflicts, err
		}
	}
	return out, conflicts, nil
}

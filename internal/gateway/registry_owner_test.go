package gateway

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// owned are the fields whose owner's doc comment says only its methods
// read or write them, by type: every field of registry, heldTable,
// listenerSet and outboxes, and the fields of sessState, call and
// modernReq the registry guards. (A call's token and ourTok are written by
// serverParams before addCall publishes the call, and read under the
// registry's lock after: listed, and allowed there alone.)
var owned = map[string]struct {
	by     string   // the type whose methods may touch them
	fields []string // nil: every field
}{
	"registry":    {"registry", nil},
	"sessState":   {"registry", []string{"calls", "inFlight", "caps", "closed", "outReqs", "protocol", "idle"}},
	"call":        {"registry", []string{"st", "conn", "token", "ourTok"}},
	"modernReq":   {"registry", []string{"closed", "private"}},
	"heldTable":   {"heldTable", nil},
	"listenerSet": {"listenerSet", nil},
	"outboxes":    {"outboxes", nil},
}

// allowedOutside are the uses outside registry.go that the registry's
// contract allows: a call's token, set before it is published.
var allowedOutside = map[string]bool{
	"forward.go:flight.serverParams:call.token":  true,
	"forward.go:flight.serverParams:call.ourTok": true,
}

// The registry's methods are the only code that reads or writes the
// tables it owns (registry.go's doc comment), and heldTable's,
// listenerSet's and outboxes' methods the only code that touches them: no
// other function of the package's own code selects their fields.
func TestOnlyTheOwnersTouchTheirTables(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the package")
	}
	out, err := exec.Command("go", "list", "-export", "-f", "{{.ImportPath}}\t{{.Export}}", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	exports := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), "\t"); ok && file != "" {
			exports[path] = file
		}
	}
	fset := token.NewFileSet()
	files, _ := filepath.Glob("*.go")
	var parsed []*ast.File
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, f)
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})}
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
	if _, err := conf.Check("github.com/mcpvisor/mcpvisor/internal/gateway", fset, parsed, info); err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, f := range parsed {
		file := filepath.Base(fset.Position(f.Pos()).Filename)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			fn, recvType := fd.Name.Name, ""
			if fd.Recv != nil {
				recvType = strings.TrimPrefix(types.ExprString(fd.Recv.List[0].Type), "*")
				fn = recvType + "." + fn
			}
			ast.Inspect(fd, func(n ast.Node) bool {
				se, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				sel := info.Selections[se]
				if sel == nil || sel.Kind() != types.FieldVal {
					return true
				}
				recv := sel.Recv()
				if p, ok := recv.(*types.Pointer); ok {
					recv = p.Elem()
				}
				named, ok := recv.(*types.Named)
				if !ok {
					return true
				}
				owner := named.Obj().Name()
				o, ok := owned[owner]
				if !ok || recvType == o.by {
					return true
				}
				field := se.Sel.Name
				if o.fields != nil && !contains(o.fields, field) {
					return true
				}
				use := file + ":" + fn + ":" + owner + "." + field
				if !allowedOutside[use] {
					bad = append(bad, fset.Position(se.Pos()).String()+" "+use)
				}
				return true
			})
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("outside its owner's methods: %s", b)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

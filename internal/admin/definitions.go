package admin

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/catalog"
	"github.com/mcpvisor/mcpvisor/internal/drift"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

// DefinitionsInfo is the "definitions" member of GET /api/servers/{name}:
// the server's pin setting, when its definitions last changed, and the
// tools it holds back until approved.
type DefinitionsInfo struct {
	Pin       bool              `json:"pin"`
	ChangedAt *time.Time        `json:"changedAt,omitempty"`
	Pending   []catalog.Pending `json:"pending"`
}

// DefinitionsDiff is the body of GET /api/servers/{name}/definitions/diff:
// the server's last change of definitions (when it was seen, and each
// definition added, removed or changed with its changed fields' values
// before and after), and the tools held back until approved, each with
// its changes since approved and the fingerprint an approval may name.
type DefinitionsDiff struct {
	Server  string            `json:"server"`
	Since   *time.Time        `json:"since,omitempty"`
	Changes []drift.Change    `json:"changes"`
	Pending []catalog.Pending `json:"pending"`
	Pin     bool              `json:"pin"`
}

// ApproveRequest is the body of POST /api/servers/{name}/approve: the
// tools to approve, each with, optionally, the fingerprint of the
// definition reviewed (from the diff's pending list; the whole SHA-256 or
// at least its first MinFingerprint hex digits): a tool whose definition
// is not that one is not approved. Naming no tool approves nothing: All
// approves every tool pending at the time, whatever its definition, and
// goes with neither Names nor Fingerprints.
type ApproveRequest struct {
	Names        []string          `json:"names,omitempty"`
	Fingerprints map[string]string `json:"fingerprints,omitempty"`
	All          bool              `json:"all,omitempty"`
}

// MinFingerprint is the fewest hex digits of a fingerprint an approval
// may give: 128 bits, so that a server cannot craft a second definition
// that shares them with the one reviewed (a birthday search on a 48-bit
// prefix takes 2^24 tries).
const MinFingerprint = 32

// ApproveResult is the body of a successful approval: the tools approved,
// those still pending, and the fingerprint of each definition approved.
type ApproveResult struct {
	Approved     []string          `json:"approved"`
	Pending      []string          `json:"pending"`
	Fingerprints map[string]string `json:"fingerprints"`
}

// maxApproveBody bounds the body of an approval.
const maxApproveBody = 1 << 20

func definitionsInfo(s *fleet.Server) *DefinitionsInfo {
	d := s.Catalog().Definitions()
	info := &DefinitionsInfo{Pin: d.Pin, Pending: describeAdded(s, d.Pending)}
	if !d.ChangedAt.IsZero() {
		t := d.ChangedAt
		info.ChangedAt = &t
	}
	return info
}

// describeAdded fills in the fields of each pending tool that is new (the
// fleet names it only): its whole definition, as cached, so that an
// operator sees what an approval would let through. A tool whose cached
// definition is no longer the one pending is left as it is (the next
// read shows the new one, pending in its place).
func describeAdded(s *fleet.Server, ps []catalog.Pending) []catalog.Pending {
	var byName map[string]drift.Def
	for i, p := range ps {
		if p.Change.Change != drift.Added || len(p.Fields) > 0 {
			continue
		}
		if byName == nil {
			items, _ := s.Catalog().CachedList(catalog.Tools)
			byName = map[string]drift.Def{}
			for _, it := range items {
				if d, err := drift.Define(drift.Tool, it); err == nil {
					byName[d.Key] = d
				}
			}
		}
		if d, ok := byName[p.Name]; ok && d.Fingerprint == p.Fingerprint {
			ps[i].Change = drift.Describe(d)
		}
	}
	return ps
}

func (h *Handler) definitionsDiff(w http.ResponseWriter, r *http.Request) {
	s := h.server(w, r)
	if s == nil {
		return
	}
	d := s.Catalog().Definitions()
	out := DefinitionsDiff{Server: s.Name(), Changes: d.Last, Pending: describeAdded(s, d.Pending), Pin: d.Pin}
	if out.Changes == nil {
		out.Changes = []drift.Change{}
	}
	if !d.ChangedAt.IsZero() {
		t := d.ChangedAt
		out.Since = &t
	}
	h.writeJSON(w, out)
}

// approve serves POST /api/servers/{name}/approve: 200 with what was
// approved (with the fingerprints approved) and what is still pending;
// 400 for a body that is not an ApproveRequest, one that names no tool
// without "all": true, a fingerprint that is not one, or a name that is
// not pending (listing those that are); 409 when a named fingerprint is
// no longer the tool's definition; 404 for an unknown server. A tool
// named without a fingerprint, or approved by "all", is approved at the
// definition pending as the request is handled (and the answer says
// which).
func (h *Handler) approve(w http.ResponseWriter, r *http.Request) {
	s := h.server(w, r)
	if s == nil {
		return
	}
	bad := func(msg string) {
		h.writeStatusJSON(w, http.StatusBadRequest, map[string]string{"error": msg})
	}
	var req ApproveRequest
	body := http.MaxBytesReader(w, r.Body, maxApproveBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		bad("body: want {\"names\": [\"tool\", ...], \"fingerprints\": {\"tool\": \"sha256\"}} (fingerprints optional) or {\"all\": true}: " + err.Error())
		return
	}
	switch {
	case req.All && (len(req.Names) > 0 || len(req.Fingerprints) > 0):
		bad("\"all\" approves every pending tool as it is now: send it, or names (with fingerprints), not both")
		return
	case !req.All && len(req.Names) == 0:
		bad("name the tools to approve, or send \"all\": true to approve every pending tool as it is now (see GET /api/servers/" + s.Name() + "/definitions/diff)")
		return
	}
	for i, n := range req.Names {
		if strings.TrimSpace(n) == "" {
			bad("names: an empty tool name")
			return
		}
		if slices.Contains(req.Names[:i], n) {
			bad("names: " + n + " is named twice")
			return
		}
	}
	for n, fp := range req.Fingerprints {
		if !slices.Contains(req.Names, n) {
			bad("fingerprints: " + n + " is not named")
			return
		}
		if !isHexPrefix(fp) {
			bad("fingerprints: " + n + ": " + strconv.Quote(fp) + " is not a fingerprint: want the definition's SHA-256 in hex, at least its first " + strconv.Itoa(MinFingerprint) + " hex digits, as the diff shows it")
			return
		}
	}
	// Each tool is approved at one definition, by its whole fingerprint:
	// the one given (a prefix stands for the pending definition's only if
	// it matches it on every digit given; else it is passed on as it is,
	// and refused as stale), or the one pending now.
	pendingFP := map[string]string{}
	var pendingNames []string
	for _, p := range s.Catalog().Definitions().Pending {
		pendingFP[p.Name] = p.Fingerprint
		pendingNames = append(pendingNames, p.Name)
	}
	names := req.Names
	if req.All {
		names = pendingNames
	}
	fps := map[string]string{}
	for _, n := range names {
		cur, pending := pendingFP[n]
		fp, given := req.Fingerprints[n]
		fp = strings.ToLower(fp)
		switch {
		case given && pending && strings.HasPrefix(cur, fp):
			fps[n] = cur
		case given:
			fps[n] = fp
		case pending:
			fps[n] = cur
		}
	}
	if len(names) == 0 { // all, with nothing pending
		h.writeJSON(w, ApproveResult{Approved: []string{}, Pending: []string{}, Fingerprints: map[string]string{}})
		return
	}
	approved, pending, err := s.Catalog().Approve(names, fps)
	switch {
	case errors.Is(err, catalog.ErrNotPending):
		h.writeStatusJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error(), "pending": nonNilStrings(pending)})
	case errors.Is(err, catalog.ErrStaleApproval):
		h.writeStatusJSON(w, http.StatusConflict, map[string]any{"error": err.Error(), "pending": nonNilStrings(pending)})
	case err != nil:
		h.writeStatusJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	default:
		res := ApproveResult{Approved: nonNilStrings(approved), Pending: nonNilStrings(pending), Fingerprints: map[string]string{}}
		for _, n := range approved {
			res.Fingerprints[n] = fps[n]
		}
		h.writeJSON(w, res)
	}
}

// AcceptLostResult is the body of a successful POST
// /api/servers/{name}/definitions/accept-lost: the server, and how many
// tools it had before it listed none.
type AcceptLostResult struct {
	Server   string `json:"server"`
	Previous int    `json:"previous"`
}

// acceptLost serves POST /api/servers/{name}/definitions/accept-lost: the
// operator accepts that the server, whose relearn found no tools where it
// had some, rightly lists none (fleet.Server.AcceptLost). 200 with what
// was given up; 409 when its tools are not lost; 404 for an unknown
// server.
func (h *Handler) acceptLost(w http.ResponseWriter, r *http.Request) {
	s := h.server(w, r)
	if s == nil {
		return
	}
	n, err := s.Catalog().AcceptLost()
	if err != nil {
		h.writeStatusJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		return
	}
	h.writeJSON(w, AcceptLostResult{Server: s.Name(), Previous: n})
}

// isHexPrefix reports whether fp can be a fingerprint or a prefix of one
// an approval may give: MinFingerprint to 64 hex digits.
func isHexPrefix(fp string) bool {
	if len(fp) < MinFingerprint || len(fp) > 64 {
		return false
	}
	for _, c := range fp {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

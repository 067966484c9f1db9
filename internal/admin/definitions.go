package admin

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/drift"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

// DefinitionsInfo is the "definitions" member of GET /api/servers/{name}:
// the server's pin setting, when its definitions last changed, and the
// tools it holds back until approved.
type DefinitionsInfo struct {
	Pin       bool            `json:"pin"`
	ChangedAt *time.Time      `json:"changedAt,omitempty"`
	Pending   []fleet.Pending `json:"pending"`
}

// DefinitionsDiff is the body of GET /api/servers/{name}/definitions/diff:
// the server's last change of definitions (when it was seen, and each
// definition added, removed or changed with its changed fields' values
// before and after), and the tools held back until approved, each with
// its changes since approved and the fingerprint an approval may name.
type DefinitionsDiff struct {
	Server  string          `json:"server"`
	Since   *time.Time      `json:"since,omitempty"`
	Changes []drift.Change  `json:"changes"`
	Pending []fleet.Pending `json:"pending"`
	Pin     bool            `json:"pin"`
}

// ApproveRequest is the body of POST /api/servers/{name}/approve: the
// tools to approve (none: every pending one), and, optionally, the
// fingerprint of the definition reviewed for each (from the diff's
// pending list): a tool whose definition changed since is not approved.
type ApproveRequest struct {
	Names        []string          `json:"names"`
	Fingerprints map[string]string `json:"fingerprints,omitempty"`
}

// ApproveResult is the body of a successful approval.
type ApproveResult struct {
	Approved []string `json:"approved"`
	Pending  []string `json:"pending"`
}

// maxApproveBody bounds the body of an approval.
const maxApproveBody = 1 << 20

func definitionsInfo(d fleet.Definitions) *DefinitionsInfo {
	info := &DefinitionsInfo{Pin: d.Pin, Pending: d.Pending}
	if !d.ChangedAt.IsZero() {
		t := d.ChangedAt
		info.ChangedAt = &t
	}
	return info
}

func (h *Handler) definitionsDiff(w http.ResponseWriter, r *http.Request) {
	s := h.server(w, r)
	if s == nil {
		return
	}
	d := s.Definitions()
	out := DefinitionsDiff{Server: s.Name(), Changes: d.Last, Pending: d.Pending, Pin: d.Pin}
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
// approved and what is still pending; 400 for a body that is not an
// ApproveRequest or a name that is not pending (listing those that are);
// 409 when a named fingerprint is no longer the tool's definition; 404 for
// an unknown server.
func (h *Handler) approve(w http.ResponseWriter, r *http.Request) {
	s := h.server(w, r)
	if s == nil {
		return
	}
	var req ApproveRequest
	body := http.MaxBytesReader(w, r.Body, maxApproveBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		h.writeStatusJSON(w, http.StatusBadRequest, map[string]string{"error": "body: want {\"names\": [\"tool\", ...], \"fingerprints\": {\"tool\": \"sha256\"}} (both optional): " + err.Error()})
		return
	}
	for _, n := range req.Names {
		if strings.TrimSpace(n) == "" {
			h.writeStatusJSON(w, http.StatusBadRequest, map[string]string{"error": "names: an empty tool name"})
			return
		}
	}
	approved, pending, err := s.Approve(req.Names, req.Fingerprints)
	switch {
	case errors.Is(err, fleet.ErrNotPending):
		h.writeStatusJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error(), "pending": nonNilStrings(pending)})
	case errors.Is(err, fleet.ErrStaleApproval):
		h.writeStatusJSON(w, http.StatusConflict, map[string]any{"error": err.Error(), "pending": nonNilStrings(pending)})
	case err != nil:
		h.writeStatusJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	default:
		h.writeJSON(w, ApproveResult{Approved: nonNilStrings(approved), Pending: nonNilStrings(pending)})
	}
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

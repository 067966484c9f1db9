package admin

import (
	"fmt"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
)

// ReloadReport is what a reload says, to the caller of POST /api/reload
// (mcpvisor reload), in the log and as an event.
type ReloadReport struct {
	Trigger string `json:"trigger"` // api, signal, watch
	// Applied is false when the new file was rejected: nothing changed.
	Applied bool `json:"applied"`
	// Problems are the new file's errors, each with its JSON path.
	Problems []ReloadProblem `json:"problems,omitempty"`
	Error    string          `json:"error,omitempty"`
	Warnings []string        `json:"warnings,omitempty"`
	// Result is what the reload did, server by server.
	Result *fleet.ReloadResult `json:"result,omitempty"`
}

// ReloadProblem is one error of a rejected file, where it is.
type ReloadProblem struct {
	Path    string `json:"path,omitempty"`
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Message string `json:"message"`
}

// String is the problem as a line: where, then what.
func (p ReloadProblem) String() string {
	at := p.Path
	if p.Line > 0 {
		at = fmt.Sprintf("line %d, column %d", p.Line, p.Column)
	}
	if at == "" {
		return p.Message
	}
	return at + ": " + p.Message
}

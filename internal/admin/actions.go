package admin

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/launch"
)

// ReloadFunc runs a reload of the configuration, bounded by ctx; report is
// the response body, and applied is false when the new configuration was
// rejected (nothing changed).
type ReloadFunc func(ctx context.Context) (report any, applied bool)

// DefaultActionTimeout bounds an action of POST /api/servers/{name}/…
// and POST /api/reload when the request gives no ?timeout=.
const DefaultActionTimeout = 2 * time.Minute

// ActionResult is the body of POST /api/servers/{name}/restart|stop|start|sleep|refresh.
type ActionResult struct {
	Server string `json:"server"`
	Action string `json:"action"`
	// OK is true when the action is done: the server stopped, or started
	// and ready.
	OK      bool           `json:"ok"`
	Error   string         `json:"error,omitempty"`
	Drained *fleet.Drained `json:"drained,omitempty"`
	TookMs  float64        `json:"tookMs"`
	Status  fleet.Status   `json:"status"`
}

// actionContext is the request's context bounded by its ?timeout= (a Go
// duration), else DefaultActionTimeout; false after a 400 naming the
// parameter.
func (h *Handler) actionContext(w http.ResponseWriter, r *http.Request) (context.Context, context.CancelFunc, bool) {
	d := DefaultActionTimeout
	if v := r.URL.Query().Get("timeout"); v != "" {
		t, err := time.ParseDuration(v)
		if err != nil || t <= 0 {
			h.writeStatusJSON(w, http.StatusBadRequest, map[string]string{"error": "timeout: want a positive duration such as 30s, got " + v})
			return nil, nil, false
		}
		d = t
	}
	ctx, cancel := context.WithTimeout(r.Context(), d)
	return ctx, cancel, true
}

// action serves POST /api/servers/{name}/{restart,stop,start,sleep,refresh}:
// each returns once done (stopped; started and ready; dormant; resolved),
// within ?timeout=. 200 when done; 504 when the timeout ended it first;
// 502 when the server could not be started; 409 for a server a reload is
// removing, for a sleep the server's state does not allow
// (fleet.Server.Sleep: not running, requests in flight, a subscriber,
// stopped by the operator), and for a refresh of a server with no package
// launcher to resolve (fleet.Server.Refresh), with the reason. A refresh
// that resolves nothing (the package is not installed, say) is done: its
// Status.Launcher says why the next start runs as written.
func (h *Handler) action(w http.ResponseWriter, r *http.Request) {
	s := h.server(w, r)
	if s == nil {
		return
	}
	ctx, cancel, ok := h.actionContext(w, r)
	if !ok {
		return
	}
	defer cancel()
	res := ActionResult{Server: s.Name(), Action: r.PathValue("action")}
	t0 := time.Now()
	var err error
	switch res.Action {
	case "stop":
		var d fleet.Drained
		d, err = s.Stop(ctx)
		res.Drained = &d
	case "start":
		err = s.Start(ctx)
	case "restart":
		var d fleet.Drained
		d, err = s.Restart(ctx)
		res.Drained = &d
	case "sleep":
		err = s.Sleep(ctx)
	case "refresh":
		_, err = s.Refresh(ctx)
	default:
		h.writeStatusJSON(w, http.StatusNotFound, map[string]string{"error": "no action " + res.Action + ": restart, stop, start, sleep or refresh"})
		return
	}
	res.TookMs = float64(time.Since(t0).Microseconds()) / 1000
	res.Status = s.Status()
	status := http.StatusOK
	switch {
	case err == nil:
		res.OK = true
	case errors.Is(err, fleet.ErrRemoved), errors.Is(err, fleet.ErrNotRunning), errors.Is(err, fleet.ErrBusy), errors.Is(err, launch.ErrNoLauncher),
		res.Action == "sleep" && errors.Is(err, fleet.ErrStopped):
		status = http.StatusConflict
	case ctx.Err() != nil:
		status = http.StatusGatewayTimeout
	default:
		status = http.StatusBadGateway
	}
	if err != nil {
		res.Error = err.Error()
	}
	h.writeStatusJSON(w, status, res)
}

// reload serves POST /api/reload: 200 with what was done, 422 with every
// problem of a rejected configuration (nothing changed), 404 when this
// mcpvisor cannot reload (no Options.Reload).
func (h *Handler) reload(w http.ResponseWriter, r *http.Request) {
	if h.opts.Reload == nil {
		h.writeStatusJSON(w, http.StatusNotFound, map[string]string{"error": "this mcpvisor does not reload its configuration"})
		return
	}
	ctx, cancel, ok := h.actionContext(w, r)
	if !ok {
		return
	}
	defer cancel()
	report, applied := h.opts.Reload(ctx)
	status := http.StatusOK
	if !applied {
		status = http.StatusUnprocessableEntity
	}
	h.writeStatusJSON(w, status, report)
}

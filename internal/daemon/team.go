package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/mcpvisor/mcpvisor/internal/admin"
	"github.com/mcpvisor/mcpvisor/internal/audit"
	"github.com/mcpvisor/mcpvisor/internal/authn"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/fleet"
	"github.com/mcpvisor/mcpvisor/internal/guard"
	"github.com/mcpvisor/mcpvisor/internal/ratelimit"
)

// teamConfig builds cfg's team identity (nil without "auth"): its
// verifier, whose introspection secret is resolved now, and the
// audiences each endpoint accepts.
func teamConfig(ctx context.Context, cfg *config.Config, f *fleet.Fleet, log *slog.Logger) (*guard.TeamConfig, error) {
	a := cfg.Auth
	if a == nil {
		return nil, nil
	}
	opts := authn.Options{Issuer: a.Issuer, Audiences: a.Audiences, Algorithms: a.Algorithms, Skew: a.ClockSkew,
		JWKSURL: a.JWKSURL, GroupsClaim: a.GroupsClaim, Logger: log}
	if opts.Audiences == nil {
		names := make([]string, 0, len(cfg.Servers))
		for _, s := range cfg.Servers {
			names = append(names, s.Name)
		}
		opts.Audiences = guard.AudiencesFor(a.PublicURL, names)
	}
	if in := a.Introspection; in != nil {
		secret, err := f.ResolveSecret(ctx, in.ClientSecret)
		if err != nil {
			return nil, fmt.Errorf("auth.introspection.clientSecret: %w", err)
		}
		opts.Introspection = &authn.Introspection{URL: in.URL, ClientID: in.ClientID, ClientSecret: secret}
	}
	v, err := authn.New(opts)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return &guard.TeamConfig{Verifier: v, PublicURL: a.PublicURL, Issuer: a.Issuer, Scopes: a.Scopes,
		ServerScopes: a.ServerScopes, AdminScope: a.AdminScope, Audiences: a.Audiences, DashboardClientID: a.DashboardClientID}, nil
}

// setTeam makes cfg's team identity the one in force, and closes the one
// it replaces. The issuer's metadata and keys are fetched in the
// background, so that the first request does not wait for them and an
// unreachable issuer shows in the log at once.
func (s *serving) setTeam(ctx context.Context, cfg *config.Config) error {
	tc, err := teamConfig(ctx, cfg, s.a.fleet, s.log)
	if err != nil {
		return err
	}
	if old := s.team.Set(tc); old != nil {
		_ = old.Verifier.Close()
	}
	// A server's scopes: its own endpoint's guard requires them of every
	// request; through /mcp the gateway does of each call of it.
	if tc != nil && len(tc.ServerScopes) > 0 {
		scopes := tc.ServerScopes
		s.a.gw.SetServerScopes(func(server string) []string { return scopes[server] })
	} else {
		s.a.gw.SetServerScopes(nil)
	}
	if tc != nil {
		s.bg.Go(func() {
			// Bounded, and cut by the shutdown, whose context it has
			// (serve waits for it before the team closes).
			pctx, cancel := context.WithTimeout(s.sd.Context(), 15*time.Second)
			defer cancel()
			if err := tc.Verifier.Prefetch(pctx); err != nil {
				s.log.Warn("auth: the issuer's metadata or keys could not be fetched yet; requests are refused (503) until they can", "issuer", tc.Issuer, "err", err)
			}
		})
	}
	return nil
}

// closeTeam closes the team identity's verifier.
func (s *serving) closeTeam() {
	if old := s.team.Set(nil); old != nil {
		_ = old.Verifier.Close()
	}
}

// resourceMetadata serves RFC 9728 protected resource metadata at the
// path-suffixed well-known URIs of /mcp, of each /servers/NAME/mcp and
// of the admin routes (the bare one), built from the config's public
// URL — never from the request's Host. Without team identity there is
// none (404).
func (s *serving) resourceMetadata(w http.ResponseWriter, r *http.Request) {
	c := s.team.Config()
	if c == nil {
		http.NotFound(w, r)
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, authn.WellKnownResource)
	var rt guard.Route
	switch {
	case rest == "" || rest == "/":
		rt = guard.Route{Admin: true}
	case rest == "/mcp":
		rt = guard.Route{Path: "/mcp"}
	default:
		name, ok := strings.CutPrefix(rest, "/servers/")
		name, ok2 := strings.CutSuffix(name, "/mcp")
		if !ok || !ok2 || name == "" || strings.Contains(name, "/") || s.a.fleet.Get(name) == nil {
			http.NotFound(w, r)
			return
		}
		rt = guard.Route{Path: rest, Server: name}
	}
	authn.Metadata{Resource: c.Resource(rt), AuthorizationServers: []string{c.Issuer}, ScopesSupported: c.NeededScopes(rt),
		ResourceName: "mcpvisor"}.Handler().ServeHTTP(w, r)
}

// auditOptions are the audit's options under cfg (nil: no audit).
func auditOptions(cfg *config.Config, stateDir string, log *slog.Logger) *audit.Options {
	a := cfg.Audit
	if a == nil {
		return nil
	}
	file := a.File
	if file == "" {
		file = filepath.Join(stateDir, "audit.jsonl")
	}
	return &audit.Options{File: file, MaxSize: a.MaxSize, MaxFiles: a.MaxFiles, Queue: a.Queue, FailClosed: a.FailClosed, Arguments: a.Arguments, Logger: log}
}

// setAudit opens cfg's audit, when it differs from the one open, and
// makes it the gateway's; the one it replaces is closed (what it had
// queued written, bounded).
func (s *serving) setAudit(cfg *config.Config) error {
	o := auditOptions(cfg, s.a.stateDir, s.log)
	if reflect.DeepEqual(o, s.auditOpts) {
		return nil
	}
	var l *audit.Log
	if o != nil {
		var err error
		if l, err = audit.Open(*o); err != nil {
			return fmt.Errorf("audit: %w", err)
		}
	}
	old := s.auditLog.Swap(l)
	s.auditOpts = o
	s.a.gw.SetAudit(l)
	if old != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = old.Close(ctx)
	}
	return nil
}

// closeAudit closes the audit, writing what it had queued (bounded by
// ctx).
func (s *serving) closeAudit(ctx context.Context) {
	if old := s.auditLog.Swap(nil); old != nil {
		s.a.gw.SetAudit(nil)
		_ = old.Close(ctx)
	}
}

// setLimits applies cfg's rate limits: the limiter is kept across
// reloads (its buckets keep their state), made at the first, dropped when
// the config has none.
func (s *serving) setLimits(cfg *config.Config) {
	l := cfg.RateLimits
	if l == nil {
		s.a.gw.SetLimits(nil)
		return
	}
	lim := limitsOf(l)
	if cur := s.a.gw.Limits(); cur != nil {
		cur.SetLimits(lim)
		return
	}
	s.a.gw.SetLimits(ratelimit.New(lim))
}

// limitsOf is l as the limiter's.
func limitsOf(l *config.LimitsConfig) ratelimit.Limits {
	return ratelimit.Limits{PerIdentity: ratelimit.Rate{PerSecond: l.PerIdentity.PerSecond, Burst: l.PerIdentity.Burst},
		PerTool: ratelimit.Rate{PerSecond: l.PerTool.PerSecond, Burst: l.PerTool.Burst}}
}

// limiterOf is a limiter of cfg's rate limits, or nil without any.
func limiterOf(cfg *config.Config) *ratelimit.Limiter {
	if cfg.RateLimits == nil {
		return nil
	}
	return ratelimit.New(limitsOf(cfg.RateLimits))
}

// auditAPI serves /api/audit from the audit in force (404 saying so when
// there is none).
func (s *serving) auditAPI(w http.ResponseWriter, r *http.Request) {
	s.auditLog.Load().Handler().ServeHTTP(w, r)
}

// teamStats are team identity's counts for /metrics.
func (s *serving) teamStats() admin.TeamStats {
	st := admin.TeamStats{Denied: s.a.gw.Denials(), ScopeRefused: s.a.gw.ScopeRefusals(), AuditRefused: s.a.gw.AuditRefusals(), ReceiverRefused: s.a.gw.ReceiverRefusals()}
	if l := s.a.gw.Audit(); l != nil {
		as := l.Stats()
		st.Audit, st.AuditAccepting = &as, l.Accepting()
	}
	if lim := s.a.gw.Limits(); lim != nil {
		ls := lim.Stats()
		st.Limits = &ls
	}
	return st
}

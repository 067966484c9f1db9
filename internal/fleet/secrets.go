package fleet

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/mcpvisor/mcpvisor/internal/backend"
	"github.com/mcpvisor/mcpvisor/internal/config"
	"github.com/mcpvisor/mcpvisor/internal/proc"
	"github.com/mcpvisor/mcpvisor/internal/secret"
	"github.com/mcpvisor/mcpvisor/lifecycle"
)

// Secret references (${env:}, ${file:}, ${keyring:}) in a server's env,
// args, headers and oauth secrets stay text in its config; they are
// resolved here, at every start or connection — a changed secret applies
// at the next one — and their values go only to that server's process or
// requests. Every value resolved is told to the server's config
// (NoteResolved), whose RedactText then hides it from its stderr, errors,
// events and status.

// SecretError is the error of a start that could not resolve one of the
// server's secret references. It names the reference, never a value. It
// is permanent (lifecycle.ErrAuthRequired): the server is not restarted
// in a loop, and starts again at `mcpvisor restart NAME` once the secret
// is there. Nothing was spawned or connected (backend.ErrSpawn: the
// history's stage is "spawn").
type SecretError struct {
	Err error // a *secret.ResolveError, or a malformed value's error
}

func (e *SecretError) Error() string { return e.Err.Error() }
func (e *SecretError) Unwrap() []error {
	return []error{lifecycle.ErrAuthRequired, backend.ErrSpawn, e.Err}
}

// secretSources are where the fleet's references are looked up, for an
// instance that runs for who (nil: none; identity.go).
func (f *Fleet) secretSources(who *secret.Identity) secret.Sources {
	src := secret.Sources{LookupEnv: f.opts.LookupEnv, Identity: who}
	if f.opts.Secrets != nil {
		src.Store = f.opts.Secrets
	}
	return src
}

// needsResolve reports whether any of values holds a reference (or a $$).
func needsResolve(values ...[]string) bool {
	for _, vs := range values {
		for _, v := range vs {
			if !secret.Literal(v) {
				return true
			}
		}
	}
	return false
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// resolve resolves one value of sc, for an instance that runs for who,
// noting what it resolved to.
func (f *Fleet) resolve(ctx context.Context, sc *config.Server, who *secret.Identity, v string) (string, error) {
	if secret.Literal(v) {
		return v, nil
	}
	r, err := secret.Resolve(ctx, v, f.secretSources(who))
	if err != nil {
		return "", fmt.Errorf("server %s: %w", sc.Name, &SecretError{Err: err})
	}
	sc.NoteResolved(r)
	return r, nil
}

// resolvedLaunch is a stdio server's env and args, resolved.
type resolvedLaunch struct {
	env  []string // KEY=value, sorted by key
	args []string
}

// resolveLaunch resolves sc's env values and args, for an instance that
// runs for who.
func (f *Fleet) resolveLaunch(ctx context.Context, sc *config.Server, who *secret.Identity) (resolvedLaunch, error) {
	var r resolvedLaunch
	keys := make([]string, 0, len(sc.Env))
	for k := range sc.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v, err := f.resolve(ctx, sc, who, sc.Env[k])
		if err != nil {
			return r, err
		}
		if strings.IndexByte(v, 0) >= 0 {
			return r, fmt.Errorf("server %s: %w", sc.Name, &SecretError{Err: fmt.Errorf("env.%s holds a NUL byte once resolved", k)})
		}
		r.env = append(r.env, k+"="+v)
	}
	if sc.Args != nil {
		r.args = make([]string, len(sc.Args))
	}
	for i, a := range sc.Args {
		v, err := f.resolve(ctx, sc, who, a)
		if err != nil {
			return r, err
		}
		if strings.IndexByte(v, 0) >= 0 {
			return r, fmt.Errorf("server %s: %w", sc.Name, &SecretError{Err: fmt.Errorf("args[%d] holds a NUL byte once resolved", i)})
		}
		r.args[i] = v
	}
	return r, nil
}

// resolveHeaders resolves sc's header values (a remote server's, at each
// connection), for an instance that runs for who.
func (f *Fleet) resolveHeaders(ctx context.Context, sc *config.Server, who *secret.Identity) (map[string]string, error) {
	out := make(map[string]string, len(sc.Headers))
	for k, hv := range sc.Headers {
		v, err := f.resolve(ctx, sc, who, hv)
		if err != nil {
			return nil, err
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return nil, fmt.Errorf("server %s: %w", sc.Name, &SecretError{Err: fmt.Errorf("headers.%s holds a line break or NUL once resolved", k)})
		}
		out[k] = v
	}
	return out, nil
}

// headerResolver is the ResolveHeaders hook of sc's connector: nil when
// its headers hold no reference.
func (f *Fleet) headerResolver(sc *config.Server, who *secret.Identity) func(context.Context) (map[string]string, error) {
	if !needsResolve(mapValues(sc.Headers)) {
		return nil
	}
	return func(ctx context.Context) (map[string]string, error) { return f.resolveHeaders(ctx, sc, who) }
}

// resolveOAuthSecrets resolves sc's oauth.clientSecret and
// oauth.privateKey ("" when not set), for its OAuth client at each
// connection. The error names the reference.
func (f *Fleet) resolveOAuthSecrets(ctx context.Context, sc *config.Server) (clientSecret, privateKey string, err error) {
	if sc.OAuth == nil {
		return "", "", nil
	}
	// The server's OAuth client is the server's, not an identity's.
	if clientSecret, err = f.resolve(ctx, sc, nil, sc.OAuth.ClientSecret); err != nil {
		return "", "", err
	}
	if privateKey, err = f.resolve(ctx, sc, nil, sc.OAuth.PrivateKey); err != nil {
		return "", "", err
	}
	return clientSecret, privateKey, nil
}

// launchSecrets carries a start's resolved env and args from its
// Connect (resolvingConnector) to its spawn (the Launch hook), which
// runs within it.
type launchSecrets struct {
	mu sync.Mutex
	r  resolvedLaunch
	// raw maps each arg as written that holds a reference to its value:
	// a package launcher's flattening rewrites the command line, passing
	// the server's own args through as they are.
	raw map[string]string
}

func (ls *launchSecrets) set(sc *config.Server, r resolvedLaunch) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.r = r
	ls.raw = map[string]string{}
	for i, a := range sc.Args {
		if !secret.Literal(a) {
			ls.raw[a] = r.args[i]
		}
	}
}

// apply puts the resolved env and args into spec, before any flattening
// (which sees the environment the server gets, and its args as
// written).
func (ls *launchSecrets) applyEnv(spec *proc.Spec) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if spec.Env == nil {
		spec.Env = append(proc.Environ(), ls.r.env...)
	} else {
		spec.Env = append(slices.Clone(spec.Env), ls.r.env...)
	}
}

// applyArgs replaces, in spec's args, each arg as written by its value.
func (ls *launchSecrets) applyArgs(spec *proc.Spec) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(ls.raw) == 0 {
		return
	}
	args := slices.Clone(spec.Args)
	for i, a := range args {
		if v, ok := ls.raw[a]; ok {
			args[i] = v
		}
	}
	spec.Args = args
}

// secretLaunch wraps a stdio connector's Launch hook (next, nil if none)
// so that each spawn gets the env and args its start resolved.
func secretLaunch(ls *launchSecrets, next func(*proc.Spec) func(error)) func(*proc.Spec) func(error) {
	return func(spec *proc.Spec) func(error) {
		ls.applyEnv(spec)
		var done func(error)
		if next != nil {
			done = next(spec)
		}
		ls.applyArgs(spec)
		return done
	}
}

// resolvingConnector resolves a stdio server's references before each
// Connect of its connector; a reference that does not resolve fails the
// start (SecretError), naming it, and nothing is spawned.
type resolvingConnector struct {
	*backend.StdioConnector
	f   *Fleet
	sc  *config.Server
	who *secret.Identity // the identity the instance runs for, if any
	ls  *launchSecrets
}

func (c *resolvingConnector) Connect(ctx context.Context) (lifecycle.Session, error) {
	r, err := c.f.resolveLaunch(ctx, c.sc, c.who)
	if err != nil {
		return nil, err
	}
	c.ls.set(c.sc, r)
	return c.StdioConnector.Connect(ctx)
}

// withSecrets wraps the stdio connector of sc so that its env and args
// are resolved at each start, as who if set (the identity its instance
// runs for); sc without references gets it as it is.
func (f *Fleet) withSecrets(sc *config.Server, who *secret.Identity, conn *backend.StdioConnector) lifecycle.Connector {
	if !needsResolve(mapValues(sc.Env), sc.Args) {
		return conn
	}
	ls := &launchSecrets{}
	conn.ExtraEnv = nil // the resolved env is built at each spawn
	conn.Launch = secretLaunch(ls, conn.Launch)
	return &resolvingConnector{StdioConnector: conn, f: f, sc: sc, who: who, ls: ls}
}

// ResolveSecret resolves the secret references of s as a server's are
// resolved (the environment, the secret store): for settings of serve's
// own, such as the introspection client's secret.
func (f *Fleet) ResolveSecret(ctx context.Context, s string) (string, error) {
	return secret.Resolve(ctx, s, f.secretSources(nil))
}

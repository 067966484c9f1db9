package clients

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpvisor/mcpvisor/internal/cli/cmdutil"
	clisecret "github.com/mcpvisor/mcpvisor/internal/cli/secret"
	"github.com/mcpvisor/mcpvisor/internal/clientcfg"
	"github.com/mcpvisor/mcpvisor/internal/jsonc"
	"github.com/mcpvisor/mcpvisor/internal/launch"
	"github.com/mcpvisor/mcpvisor/internal/secret"
	"github.com/mcpvisor/mcpvisor/internal/shutdown"
	"github.com/mcpvisor/mcpvisor/internal/userdirs"
)

// ImportOptions are import's.
type ImportOptions struct {
	IO cmdutil.IOStreams
	// Sources are the clients and files named (arguments; none: every
	// client found).
	Sources []string
	// Config is mcpvisor's config ("": the user's).
	Config string
	DryRun bool
	// MoveSecrets stores the literal secrets of the entries imported
	// with Secrets and writes ${keyring:NAME} references in their place.
	MoveSecrets bool
	// Secrets is the secret store of --move-secrets (the caller's:
	// internal/secret's), read too (when it can Get) to tell whether an
	// entry is a server of mcpvisor's config that holds its secrets by
	// reference. Nil: the store serve reads, opened when needed.
	Secrets clientcfg.SecretSetter
}

// SecretGetter reads a stored secret (internal/secret's stores do).
type SecretGetter interface {
	Get(ctx context.Context, name string) (string, error)
}

// storeReader reads the store the secrets of mcpvisor's config (file)
// are in: st when it can Get, else the store serve reads for file,
// opened at the first read.
type storeReader struct {
	ctx    context.Context
	g      SecretGetter
	file   string
	opened bool
}

func newStoreReader(ctx context.Context, st any, file string) *storeReader {
	g, _ := st.(SecretGetter)
	return &storeReader{ctx: ctx, g: g, file: file, opened: g != nil}
}

func (r *storeReader) get(name string) (string, error) {
	if !r.opened {
		r.opened = true
		if s, err := clisecret.OpenStore(r.file, ""); err == nil {
			r.g = s
		}
	}
	if r.g == nil {
		return "", errors.New("no secret store")
	}
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	return r.g.Get(ctx, name)
}

// lookup reads a secret; one that cannot be read matches nothing.
func (r *storeReader) lookup(name string) (string, bool) {
	v, err := r.get(name)
	return v, err == nil
}

// exists reports whether the store may hold name: when it cannot tell,
// it may.
func (r *storeReader) exists(name string) bool {
	_, err := r.get(name)
	return !errors.Is(err, secret.ErrNotFound)
}

// storedSecrets reads the secrets mcpvisor's config (file) references:
// from st when it can Get, else from the store serve reads for file,
// opened at the first lookup. A secret that cannot be read matches
// nothing.
func storedSecrets(ctx context.Context, st any, file string) clientcfg.SecretLookup {
	return newStoreReader(ctx, st, file).lookup
}

// NewCmdImport is import: its flags fill an ImportOptions, run by runF
// (nil: RunImport).
func NewCmdImport(streams cmdutil.IOStreams, runF func(context.Context, *ImportOptions) error) *cobra.Command {
	o := &ImportOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "import [CLIENT|FILE...] [--dry-run] [--config FILE]",
		Short: "Add the MCP servers of desktop clients to mcpvisor's config",
		Long: `Add the MCP servers of desktop clients to mcpvisor's config.

CLIENT is one of: ` + strings.Join(clientcfg.Names(), ", ") + `; each of its
configuration files found (user, profiles, and the current directory's
project files) is read. FILE is any such file, its format told from its
content (.toml: Codex). With no argument, every client found on this
machine is imported.

A server whose launch (command, args, env, cwd; or url, headers) is
already in the config is skipped, whatever its name; a new server whose
name is taken is added as NAME-CLIENT, and said so. Nothing in the config
is changed or reordered: entries are only added to "mcpServers", every
other byte stays. Codex's enabled_tools and disabled_tools become the
server's tools {allow, deny} (the same launch with another filter is
another server), and the clients' timeouts its initTimeout and
requestTimeout. A project's servers (Claude Code's projects, a
project's .mcp.json, .vscode/mcp.json, .zed/settings.json) get the
project's directory as cwd, where the client runs them. Fields mcpvisor
does not need are listed with their path; a server that needs the client
to run (it prompts for an input, a Zed extension) or that the client
restricts in ways mcpvisor cannot carry (VS Code's sandbox or envFile,
Codex's env_vars, a sign-in, a field mcpvisor does not know) is not
imported at all, its fields named.

The config is --config, else ` + "`$XDG_CONFIG_HOME/mcpvisor/config.json`" + `
(~/.config/mcpvisor/config.json), created when missing. It is replaced
atomically, keeping its mode. --dry-run prints the change as a unified
diff and writes nothing.

An entry that runs mcp-remote (npx [-y] mcp-remote URL [--header "K: V"]…
[--transport …], also through pnpm dlx, bunx or yarn dlx) is imported as
the remote server it reaches: mcpvisor connects to it itself, which saves
one Node process. Its headers get the values of the entry's env
(mcp-remote's ${NAME}); a flag mcpvisor cannot honour (--resource, a file
of client info, an unknown flag) keeps it a local server, and says why.
A remote entry with the client's own sign-in (Claude Code's oauth, Codex's
scopes, mcp-remote) is imported with its clientId and scopes as its
oauth: mcpvisor signs in to it now, with ` + "`mcpvisor login NAME`" + `.
Codex's bearer_token_env_var and env_http_headers become headers
referencing those variables.

--move-secrets stores the literal secrets of the entries imported (env
and header values named or shaped like secrets, the values of --api-key,
--token=… and token-shaped args such as ghp_…, sk-…, Bearer …, an oauth
client secret) in the secret store, named SERVER.ENV_KEY,
SERVER.header.NAME, SERVER.argN or SERVER.oauth.clientSecret (with a
suffix, -2, -3…, when the store or another entry holds the name: no
secret is overwritten), and writes
${keyring:NAME} references in their place: the config then holds none
of them. Values that are references already stay. A secret inside a URL
is not moved: import warns of it. A secret that cannot be stored
stops the import before the config is written (the secrets it stored
before are removed again, and only those). Without it, import warns of the literal secrets it
copies.

` + diffSecretsHelp,
		Args: cobra.ArbitraryArgs,
		RunE: cmdutil.RunE(o, func(cmd *cobra.Command, args []string) error {
			o.IO = streams.Or(cmd)
			o.Sources = args
			return nil
		}, runF, RunImport),
	}
	cmd.Flags().StringVarP(&o.Config, "config", "c", "", "mcpvisor's configuration file (default $XDG_CONFIG_HOME/mcpvisor/config.json)")
	cmd.Flags().BoolVar(&o.DryRun, "dry-run", false, "print the change as a unified diff; write nothing")
	cmd.Flags().BoolVar(&o.MoveSecrets, "move-secrets", false, "store literal secrets in the secret store and write ${keyring:NAME} references instead")
	return cmd
}

// RunImport adds the named clients' (or files') servers to mcpvisor's
// config, leaving every other byte of it as it was.
func RunImport(ctx context.Context, o *ImportOptions) error {
	out, file := o.IO.Out, o.Config
	if file == "" {
		file = userdirs.DefaultConfigFile()
	}
	sources, err := importSources(o.Sources, o.IO.ErrOut)
	if err != nil {
		return err
	}
	old, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	exists := err == nil
	if o.MoveSecrets && o.Secrets == nil && !o.DryRun {
		// The store serve reads: the state directory of this config.
		st, err := clisecret.OpenStore(file, "")
		if err != nil {
			return fmt.Errorf("--move-secrets: %w", err)
		}
		o.Secrets = st
	}
	sr := newStoreReader(ctx, o.Secrets, file)
	merged, secrets, err := importInto(old, file, sources, out, importMode{moveSecrets: o.MoveSecrets, stored: sr.lookup, exists: sr.exists,
		hint: "pass --move-secrets to keep them in the secret store instead"})
	if err != nil {
		return err
	}
	if bytes.Equal(merged, old) && exists {
		fmt.Fprintf(out, "%s: nothing to add\n", file)
		return nil
	}
	if o.DryRun {
		if len(secrets) > 0 {
			fmt.Fprintf(out, "would store %s in the secret store\n", secretNames(secrets))
		}
		fmt.Fprint(out, clientcfg.DiffRedacted(old, merged, clientcfg.FormatMCPServers, file, file+" (imported)"))
		return nil
	}
	if err := storeSecrets(ctx, o.Secrets, secrets, sr.exists); err != nil {
		return fmt.Errorf("%w; %s is left as it was", err, file)
	}
	if len(secrets) > 0 {
		fmt.Fprintf(out, "stored %s in the secret store\n", secretNames(secrets))
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	if err := clientcfg.ReplaceFile(file, merged, 0o600, old, exists); err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	fmt.Fprintf(out, "%s: written\n", file)
	return nil
}

// importSource is one client file to import.
type importSource struct {
	client *clientcfg.Client // nil for a file named on the command line
	label  string            // what a renamed server gets after '-'
	path   string
	format clientcfg.Format
	// project is the project directory the file belongs to, if any:
	// its servers run there.
	project string
}

// clientEnv is this machine's, for client locations.
func clientEnv() clientcfg.Env {
	home, _ := os.UserHomeDir()
	wd, _ := os.Getwd()
	return clientcfg.Env{GOOS: runtime.GOOS, Home: home, Getenv: os.Getenv, Project: wd}
}

// clientFiles lists a client's files that exist.
func clientFiles(c *clientcfg.Client) []importSource {
	var out []importSource
	env := clientEnv()
	for _, l := range c.Locations(env) {
		paths := []string{l.Path}
		if l.Glob {
			paths, _ = filepath.Glob(l.Path)
		}
		project := ""
		if l.Scope == clientcfg.ScopeProject {
			project = clientcfg.ProjectDir(l.Path, env.Home) // "" in the home directory: the user's file
		}
		for _, p := range paths {
			if slices.ContainsFunc(out, func(s importSource) bool { return s.path == p }) {
				continue // the project is the home directory
			}
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				out = append(out, importSource{client: c, label: c.Name, path: p, format: l.Format, project: project})
			}
		}
	}
	return out
}

// importSources turns import's arguments into files.
func importSources(args []string, warn io.Writer) ([]importSource, error) {
	var out []importSource
	if len(args) == 0 {
		for _, c := range clientcfg.Clients() {
			out = append(out, clientFiles(c)...)
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("no client configuration found on this machine; name a file")
		}
		return out, nil
	}
	for _, a := range args {
		if c := clientcfg.Lookup(a); c != nil {
			files := clientFiles(c)
			if len(files) == 0 {
				fmt.Fprintf(warn, "%s: no configuration file found (looked at %s)\n", a, c.Target(clientEnv()).Path)
			}
			out = append(out, files...)
			continue
		}
		data, err := os.ReadFile(a)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && !strings.ContainsAny(a, `/\.`) {
				return nil, shutdown.UsageError{Err: fmt.Errorf("%q is neither a client (%s) nor a file", a, strings.Join(clientcfg.Names(), ", "))}
			}
			return nil, err
		}
		f, err := detectFormat(a, data)
		if err != nil {
			return nil, err
		}
		label := strings.TrimSuffix(filepath.Base(a), filepath.Ext(a))
		abs, err := filepath.Abs(a)
		if err != nil {
			return nil, err
		}
		out = append(out, importSource{label: label, path: a, format: f, project: clientcfg.ProjectDir(abs, clientEnv().Home)})
	}
	return out, nil
}

// detectFormat tells a client file's format from its name and content.
func detectFormat(name string, data []byte) (clientcfg.Format, error) {
	if strings.HasSuffix(strings.ToLower(name), ".toml") {
		return clientcfg.FormatCodex, nil
	}
	root, err := jsonc.Parse(data)
	if err != nil {
		return 0, fmt.Errorf("%s:%w", name, err)
	}
	switch {
	case root.Get("mcpServers") != nil && root.Get("projects") != nil:
		return clientcfg.FormatClaudeUser, nil
	case root.Get("mcpServers") != nil:
		return clientcfg.FormatMCPServers, nil
	case root.Get("servers") != nil:
		return clientcfg.FormatVSCode, nil
	case root.Get("context_servers") != nil:
		return clientcfg.FormatZed, nil
	case root.Get("mcp") != nil && root.Get("mcp").Get("servers") != nil:
		return clientcfg.FormatVSCodeSettings, nil
	case root.Get("projects") != nil:
		return clientcfg.FormatClaudeUser, nil
	}
	return 0, fmt.Errorf("%s: no MCP servers found (want mcpServers, servers, context_servers or a .toml file with mcp_servers)", name)
}

// readSource reads one source's servers.
func readSource(src importSource) (*clientcfg.File, error) {
	data, err := os.ReadFile(src.path)
	if err != nil {
		return nil, err
	}
	var f *clientcfg.File
	if src.client != nil {
		f, err = src.client.ReadIn(data, src.format, src.project)
	} else {
		f, err = clientcfg.ReadIn(data, src.format, src.project)
	}
	if err != nil {
		return nil, fmt.Errorf("%s:%w", src.path, err)
	}
	f.TakeOverMCPRemote(parseLauncher)
	return f, nil
}

// parseLauncher is internal/launch's parser, for clientcfg.
func parseLauncher(command string, args []string) (*clientcfg.Launch, error) {
	f, err := launch.Parse(command, args)
	if err != nil || f == nil {
		return nil, err
	}
	return &clientcfg.Launch{Packages: f.Packages, Target: f.Target, Args: f.Args}, nil
}

// importMode is how importInto imports.
type importMode struct {
	// moveSecrets replaces the entries' literal secrets by references,
	// returned to be stored.
	moveSecrets bool
	// hint says how to keep literal secrets out of the config.
	hint string
	// stored reads the secrets mcpvisor's config references (see
	// clientcfg.SameServer).
	stored clientcfg.SecretLookup
	// exists reports whether the secret store may hold a name: a moved
	// secret is never given one (nil: none is held).
	exists func(name string) bool
}

// secretNames lists secrets by name.
func secretNames(l []clientcfg.Secret) string {
	var names []string
	for _, s := range l {
		names = append(names, s.Name)
	}
	return strings.Join(names, ", ")
}

// secretDeleter is a secret store that can also remove (internal/secret's
// can): a failed import removes the secrets it stored.
type secretDeleter interface {
	Delete(ctx context.Context, name string) error
}

// storeSecrets stores the secrets in order, each under a name the store
// does not hold (exists, nil when it cannot tell: a name is never
// overwritten); when one fails, the ones this call stored are removed
// again (if the store can), and the error names it, never its value.
func storeSecrets(ctx context.Context, store clientcfg.SecretSetter, secrets []clientcfg.Secret, exists func(string) bool) error {
	for i, s := range secrets {
		var err error
		if exists != nil && exists(s.Name) {
			err = fmt.Errorf("storing secret %s (%s): the secret store holds one of that name, which is not overwritten", s.Name, s.At)
		} else if err = store.Set(ctx, s.Name, s.Value()); err != nil {
			err = fmt.Errorf("storing secret %s (%s): %w", s.Name, s.At, err)
		}
		if err == nil {
			continue
		}
		if i == 0 {
			return err
		}
		stored := secretNames(secrets[:i])
		d, ok := store.(secretDeleter)
		if !ok {
			return fmt.Errorf("%w (%s stay in the secret store)", err, stored)
		}
		var left []string
		for _, p := range secrets[:i] {
			if d.Delete(ctx, p.Name) != nil {
				left = append(left, p.Name)
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("%w (%s could not be removed again)", err, strings.Join(left, ", "))
		}
		return fmt.Errorf("%w (%s removed again)", err, stored)
	}
	return nil
}

// importInto adds the servers of sources to mcpvisor's config held in
// old (nil: none yet) and returns the new content, reporting to w, with
// mode.moveSecrets the secrets to store that it references.
func importInto(old []byte, name string, sources []importSource, w io.Writer, mode importMode) ([]byte, []clientcfg.Secret, error) {
	data := old
	if data == nil {
		data = []byte("{}\n")
	}
	mine, err := clientcfg.Read(data, clientcfg.FormatMCPServers)
	if err != nil {
		return nil, nil, fmt.Errorf("%s:%w (mcpvisor's config is left as it is)", name, err)
	}
	known := slices.Clone(mine.Servers)
	var secrets []clientcfg.Secret
	// The names a moved secret must not take: those the config refers
	// to, those taken by this import, those the store holds.
	used := referencedSecrets(mine.Servers)
	inUse := func(name string) bool {
		return used[name] || mode.exists != nil && mode.exists(name)
	}
	for _, src := range sources {
		f, err := readSource(src)
		if err != nil {
			return nil, nil, err
		}
		for _, p := range f.Problems {
			fmt.Fprintf(w, "%s: %s: not imported\n", src.path, p)
		}
		for _, s := range f.Servers {
			for _, n := range s.Unsupported {
				fmt.Fprintf(w, "%s: %s: %s\n", src.path, n.At, n.Msg)
			}
			switch {
			case s.IsConnect():
				continue
			case s.Blocked != "":
				if !strings.HasPrefix(s.Blocked, "invalid: ") {
					fmt.Fprintf(w, "%s: %s: not imported: %s\n", src.path, s.At, s.Blocked)
				}
				continue
			case len(s.ClientOnly) > 0:
				fmt.Fprintf(w, "%s: %s: not imported, left to the client: %s\n", src.path, s.At, s.LeftToClient())
				continue
			}
			// The same launch filtering the tools otherwise is another
			// server: what the client hid stays hidden.
			if i := slices.IndexFunc(known, func(k *clientcfg.Server) bool {
				return clientcfg.SameServer(k, s, mode.stored) && clientcfg.SameTools(k.Tools, s.Tools)
			}); i >= 0 {
				if known[i].Name != s.Name {
					fmt.Fprintf(w, "%s: %s: the same server as %q, skipped\n", src.path, s.At, known[i].Name)
				}
				continue
			}
			n := importName(s.Name, src.label, known)
			if i := slices.IndexFunc(known, func(k *clientcfg.Server) bool { return clientcfg.SameServer(k, s, mode.stored) }); i >= 0 {
				fmt.Fprintf(w, "%s: %s: added as %q (the launch of %q, with tools %s instead of %s)\n", src.path, s.At, n, known[i].Name, s.Tools, known[i].Tools)
			} else if n != s.Name {
				fmt.Fprintf(w, "%s: %s: added as %q (the name is taken by another server)\n", src.path, s.At, n)
			} else {
				fmt.Fprintf(w, "%s: %s: added\n", src.path, s.At)
			}
			for _, note := range s.Notes {
				fmt.Fprintf(w, "%s: %s: %s\n", src.path, note.At, note.Msg)
			}
			if s.Login {
				fmt.Fprintf(w, "%s: %s: mcpvisor signs in to it now, not the client: log in with `mcpvisor login %s` when it asks\n", src.path, s.At, n)
			}
			entry := s
			if lit := s.LiteralSecrets(n); len(lit) > 0 {
				if mode.moveSecrets {
					var moved []clientcfg.Secret
					entry, moved = s.MoveSecretsAvoiding(n, inUse)
					for _, m := range moved {
						used[m.Name] = true
					}
					secrets = append(secrets, moved...)
					fmt.Fprintf(w, "%s: %s: its secrets go to the secret store: %s\n", src.path, s.At, secretRefs(moved))
				} else {
					fmt.Fprintf(w, "%s: %s: warning: copies literal secrets into mcpvisor's config (%s); %s\n", src.path, s.At, secretFields(lit), mode.hint)
				}
			}
			if at := s.URLSecrets(); len(at) > 0 {
				fmt.Fprintf(w, "%s: %s: warning: a URL holds a secret (%s), which import copies as it is (--move-secrets moves none in a URL: edit it by hand)\n", src.path, s.At, strings.Join(at, ", "))
			}
			if data, err = jsonc.SetMember(data, []string{"mcpServers"}, n, entry.Entry()); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", name, err)
			}
			c := *s
			c.Name = n
			known = append(known, &c)
		}
	}
	if old == nil && len(known) == 0 {
		return nil, nil, fmt.Errorf("no server to import")
	}
	return data, secrets, nil
}

// keyringRef is a ${keyring:NAME} reference.
var keyringRef = regexp.MustCompile(`\$\{keyring:([^}]*)\}`)

// referencedSecrets are the names the servers' ${keyring:NAME}
// references name.
func referencedSecrets(servers []*clientcfg.Server) map[string]bool {
	used := map[string]bool{}
	add := func(v string) {
		for _, m := range keyringRef.FindAllStringSubmatch(v, -1) {
			used[m[1]] = true
		}
	}
	for _, s := range servers {
		for _, kv := range append(slices.Clone(s.Env), s.Headers...) {
			add(kv.Value)
		}
		for _, a := range s.Args {
			add(a)
		}
		if s.OAuth != nil {
			add(s.OAuth.ClientSecret)
		}
	}
	return used
}

// secretFields lists the fields that hold secrets.
func secretFields(l []clientcfg.Secret) string {
	var at []string
	for _, s := range l {
		at = append(at, s.At)
	}
	return strings.Join(at, ", ")
}

// secretRefs lists each secret's field and reference.
func secretRefs(l []clientcfg.Secret) string {
	var refs []string
	for _, s := range l {
		refs = append(refs, s.At+" "+s.Reference())
	}
	return strings.Join(refs, ", ")
}

// importName returns name made valid for mcpvisor and, when taken, with
// -label (then -label-2, …) added.
func importName(name, label string, known []*clientcfg.Server) string {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '_' || r == '-' || r == '.' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' {
				return r
			}
			return '-'
		}, s)
	}
	name = clean(name)
	if name == "" || name == "." || name == ".." {
		name = "server"
	}
	taken := func(n string) bool {
		return slices.ContainsFunc(known, func(k *clientcfg.Server) bool { return k.Name == n })
	}
	if !taken(name) {
		return name
	}
	base := name + "-" + clean(label)
	n := base
	for i := 2; taken(n); i++ {
		n = fmt.Sprintf("%s-%d", base, i)
	}
	return n
}

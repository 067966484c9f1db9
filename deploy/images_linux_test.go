//go:build linux && deploycheck

package deploy

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// imageTag is the tag the test builds (make images builds dev): mcpvisor:test
// and mcpvisor:test-node, in make images' storage (.deps/containers).
const imageTag = "test"

// TestImages builds both images with podman (deploy/docker/build.sh, as
// make images does), then reads them without running them: their config
// (podman image inspect) and their file systems (podman create, which
// starts nothing, and podman export).
func TestImages(t *testing.T) {
	root := moduleRoot()
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatal("the image tests need podman: scripts/test-deps.sh installs it (apt-get, as root)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	build := exec.CommandContext(ctx, filepath.Join(root, "deploy", "docker", "build.sh"))
	build.Env = append(os.Environ(), "TAG="+imageTag)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("deploy/docker/build.sh: %v\n%s", err, out)
	}
	t.Logf("both images built in %v (the build context included)", time.Since(start).Round(time.Millisecond))
	revision, _ := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()

	base := "mcpvisor:" + imageTag
	node := base + "-node"
	for _, img := range []struct {
		name, title string
		node        bool
	}{{base, "mcpvisor", false}, {node, "mcpvisor-node", true}} {
		t.Run(img.title, func(t *testing.T) {
			cfg := inspect(t, img.name)
			if cfg.User != "65532:65532" && cfg.User != "65532" {
				t.Errorf("user %q, want 65532", cfg.User)
			}
			if !slices.Equal(cfg.Entrypoint, []string{"/usr/local/bin/mcpvisor"}) {
				t.Errorf("entrypoint %q, want [/usr/local/bin/mcpvisor]", cfg.Entrypoint)
			}
			env := map[string]string{}
			for _, e := range cfg.Env {
				k, v, _ := strings.Cut(e, "=")
				env[k] = v
			}
			if p := strings.Split(env["PATH"], ":"); len(p) == 0 || p[0] != "/usr/local/bin" {
				t.Errorf("PATH %q, want /usr/local/bin first", env["PATH"])
			}
			if env["HOME"] != "/home/nonroot" {
				t.Errorf("HOME %q, want /home/nonroot", env["HOME"])
			}
			for _, v := range []string{"/tmp", "/home/nonroot", "/var/lib/mcpvisor"} {
				if _, ok := cfg.Volumes[v]; !ok {
					t.Errorf("no volume %s (writable with a read-only root file system); volumes %v", v, cfg.Volumes)
				}
			}
			l := cfg.Labels
			if l["org.opencontainers.image.title"] != img.title {
				t.Errorf("label title %q, want %q", l["org.opencontainers.image.title"], img.title)
			}
			for _, k := range []string{"source", "version", "created", "description"} {
				if l["org.opencontainers.image."+k] == "" {
					t.Errorf("no label org.opencontainers.image.%s: %v", k, l)
				}
			}
			if r := strings.TrimSpace(string(revision)); r != "" && l["org.opencontainers.image.revision"] != r {
				t.Errorf("label revision %q, want HEAD %s", l["org.opencontainers.image.revision"], r)
			}

			dir := t.TempDir()
			files := export(t, img.name, dir)
			checkBase(t, dir, files)
			// Static, it runs here too: its version is the image's.
			out, err := exec.CommandContext(t.Context(), filepath.Join(dir, "usr/local/bin/mcpvisor"), "version").CombinedOutput()
			if v := l["org.opencontainers.image.version"]; err != nil || !strings.HasPrefix(string(out), "mcpvisor "+v+" ") {
				t.Errorf("mcpvisor version in the image: %q (%v), want mcpvisor %s …", out, err, v)
			}
			if img.node {
				checkNode(t, dir, files)
			} else if _, ok := files["usr/local/bin/node"]; ok {
				t.Error("the mcpvisor image has node")
			}
		})
	}
}

// imageConfig is what the tests read of podman image inspect.
type imageConfig struct {
	User       string              `json:"User"`
	Entrypoint []string            `json:"Entrypoint"`
	Env        []string            `json:"Env"`
	Volumes    map[string]struct{} `json:"Volumes"`
	Labels     map[string]string   `json:"Labels"`
}

func podman(t *testing.T, stdout io.Writer, args ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(moduleRoot(), "deploy", "docker", "podman.sh"), args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("podman %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return nil
}

func inspect(t *testing.T, image string) imageConfig {
	t.Helper()
	var out bytes.Buffer
	if err := podman(t, &out, "image", "inspect", image); err != nil {
		t.Fatal(err)
	}
	var imgs []struct {
		Config imageConfig `json:"Config"`
	}
	if err := json.Unmarshal(out.Bytes(), &imgs); err != nil || len(imgs) != 1 {
		t.Fatalf("podman image inspect %s: %d images (%v)\n%s", image, len(imgs), err, out.Bytes())
	}
	return imgs[0].Config
}

// export writes the image's file system into dir (files, directories,
// links; with their modes) through a container that is created, never
// started, and returns each entry's tar header by its path ("usr/bin").
func export(t *testing.T, image, dir string) map[string]*tar.Header {
	t.Helper()
	var id bytes.Buffer
	if err := podman(t, &id, "create", image); err != nil {
		t.Fatal(err)
	}
	ctr := strings.TrimSpace(id.String())
	defer func() {
		if err := podman(t, io.Discard, "rm", ctr); err != nil {
			t.Error(err)
		}
	}()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := podman(t, pw, "export", ctr)
		pw.CloseWithError(err)
		done <- err
	}()
	files, err := untar(pr, dir)
	pr.CloseWithError(err) // unblocks podman if untar stopped early
	if perr := <-done; perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		t.Fatalf("export %s: %v", image, err)
	}
	return files
}

func untar(r io.Reader, dir string) (map[string]*tar.Header, error) {
	files := map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." || strings.HasPrefix(name, "../") {
			continue
		}
		files[name] = h
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		mode := os.FileMode(h.Mode).Perm()
		if h.Mode&01000 != 0 {
			mode |= os.ModeSticky
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return nil, err
			}
			if err := os.Chmod(p, mode); err != nil {
				return nil, err
			}
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				return nil, err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				return nil, err
			}
		case tar.TypeLink:
			if err := os.Link(filepath.Join(dir, filepath.FromSlash(path.Clean(h.Linkname))), p); err != nil {
				return nil, err
			}
		}
	}
}

// resolve follows name's symbolic links inside the image's tree (an
// absolute target is from the image's root), and returns the final
// entry's path, or "" if a link leads nowhere in the image.
func resolve(files map[string]*tar.Header, name string) string {
	for range 40 {
		// Each directory on the way may be a link too (/bin -> usr/bin).
		parts := strings.Split(name, "/")
		changed := false
		for i := 1; i <= len(parts); i++ {
			prefix := strings.Join(parts[:i], "/")
			h, ok := files[prefix]
			if !ok {
				return ""
			}
			if h.Typeflag == tar.TypeSymlink {
				target := h.Linkname
				if !strings.HasPrefix(target, "/") {
					target = path.Join(path.Dir(prefix), target)
				}
				name = path.Clean(strings.TrimPrefix(path.Join(target, strings.Join(parts[i:], "/")), "/"))
				changed = true
				break
			}
		}
		if !changed {
			return name
		}
	}
	return ""
}

// checkBase checks what every image has.
func checkBase(t *testing.T, dir string, files map[string]*tar.Header) {
	t.Helper()
	for _, bin := range []string{"usr/local/bin/mcpvisor", "usr/local/bin/mcpvisor-shim"} {
		h, ok := files[bin]
		if !ok || h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 || h.Size == 0 {
			t.Errorf("/%s: not an executable file in the image (%+v)", bin, h)
			continue
		}
		if err := static(filepath.Join(dir, bin)); err != nil {
			t.Errorf("/%s: %v (the image has no libc: CGO_ENABLED=0)", bin, err)
		}
	}
	certs, err := os.ReadFile(filepath.Join(dir, "etc/ssl/certs/ca-certificates.crt"))
	if err != nil || len(certs) == 0 {
		t.Errorf("/etc/ssl/certs/ca-certificates.crt: %d bytes (%v)", len(certs), err)
	} else {
		pool := x509.NewCertPool()
		n := 0
		for rest := certs; ; n++ {
			var ok bool
			if rest, ok = appendOne(pool, rest); !ok {
				break
			}
		}
		if n < 100 {
			t.Errorf("/etc/ssl/certs/ca-certificates.crt: %d certificates, want Mozilla's (over 100)", n)
		}
	}
	if !hasEntry(filepath.Join(dir, "etc/passwd"), func(f []string) bool {
		return len(f) == 7 && f[2] == "65532" && f[3] == "65532" && f[5] == "/home/nonroot"
	}) {
		t.Error("/etc/passwd has no user 65532 (group 65532, home /home/nonroot)")
	}
	if !hasEntry(filepath.Join(dir, "etc/group"), func(f []string) bool { return len(f) == 4 && f[2] == "65532" }) {
		t.Error("/etc/group has no group 65532")
	}
	if !hasEntry(filepath.Join(dir, "etc/passwd"), func(f []string) bool { return len(f) == 7 && f[0] == "root" && f[2] == "0" }) {
		t.Error("/etc/passwd has no root: it is not base-passwd's")
	}
	if h, ok := files["tmp"]; !ok || h.Typeflag != tar.TypeDir || h.Mode&01777 != 01777 {
		t.Errorf("/tmp: want a directory, mode 1777 (%+v)", h)
	}
	for _, d := range []string{"home/nonroot", "var/lib/mcpvisor"} {
		if h, ok := files[d]; !ok || h.Typeflag != tar.TypeDir || h.Uid != 65532 {
			t.Errorf("/%s: want a directory of uid 65532 (%+v)", d, h)
		}
	}
	for _, d := range []string{"home", "var", "var/lib"} {
		if h, ok := files[d]; !ok || h.Uid != 0 {
			t.Errorf("/%s: want a directory of root (%+v)", d, h)
		}
	}
}

// appendOne adds the first PEM certificate of b to pool and returns the
// rest.
func appendOne(pool *x509.CertPool, b []byte) ([]byte, bool) {
	const end = "-----END CERTIFICATE-----"
	i := bytes.Index(b, []byte(end))
	if i < 0 {
		return nil, false
	}
	return b[i+len(end):], pool.AppendCertsFromPEM(b[:i+len(end)])
}

func hasEntry(file string, match func(fields []string) bool) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if match(strings.Split(strings.TrimSpace(line), ":")) {
			return true
		}
	}
	return false
}

// static returns an error unless file is an ELF executable with no
// interpreter and no shared libraries.
func static(file string) error {
	f, err := elf.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked (it has an interpreter)")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		return fmt.Errorf("needs %v", libs)
	}
	return nil
}

// checkNode checks what the node image adds, and that node, npm and npx
// run on the image's own libraries: as root (CI), npx runs a local
// package's #!/usr/bin/env node bin through sh, chrooted into the image's
// tree as uid 65532 — what `npx -y @scope/server` does; otherwise node
// and npx --version run through the image's own dynamic loader.
func checkNode(t *testing.T, dir string, files map[string]*tar.Header) {
	t.Helper()
	for _, name := range []string{"usr/local/bin/node", "usr/local/bin/npm", "usr/local/bin/npx", "bin/sh", "usr/bin/env", "lib64/ld-linux-x86-64.so.2"} {
		if name == "lib64/ld-linux-x86-64.so.2" && files["lib64"] == nil {
			continue // arm64: the loader is in /lib
		}
		real := resolve(files, name)
		h := files[real]
		if real == "" || h == nil || h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 && !strings.HasSuffix(real, ".so.2") {
			t.Errorf("/%s: not an executable file in the image (it leads to %q)", name, real)
		}
	}
	if real := resolve(files, "usr/local/bin/npx"); real != "usr/local/lib/node_modules/npm/bin/npx-cli.js" {
		t.Errorf("/usr/local/bin/npx leads to /%s, want npm's npx-cli.js", real)
	}

	if os.Geteuid() != 0 {
		loaderName, libs := "lib64/ld-linux-x86-64.so.2", "usr/lib/x86_64-linux-gnu"
		if files["lib64"] == nil {
			loaderName, libs = "lib/ld-linux-aarch64.so.1", "usr/lib/aarch64-linux-gnu"
		}
		loader := filepath.Join(dir, filepath.FromSlash(resolve(files, loaderName)))
		libs = filepath.Join(dir, libs)
		for _, args := range [][]string{
			{"--list", filepath.Join(dir, "usr/local/bin/node")},
			{filepath.Join(dir, "usr/local/bin/node"), filepath.Join(dir, "usr/local/lib/node_modules/npm/bin/npx-cli.js"), "--version"},
		} {
			cmd := exec.CommandContext(t.Context(), loader, append([]string{"--inhibit-cache", "--library-path", libs}, args...)...)
			cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=/nonexistent"}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("node through the image's loader, %q: %v\n%s", args, err, out)
				continue
			}
			if args[0] == "--list" {
				for line := range strings.Lines(string(out)) {
					if _, lib, ok := strings.Cut(line, "=> "); ok && !strings.HasPrefix(lib, dir) {
						t.Errorf("node loads %s from outside the image", strings.TrimSpace(line))
					}
				}
			}
			t.Logf("%s", bytes.TrimSpace(out))
		}
		return
	}

	pkg := filepath.Join(dir, "tmp", "pkg")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(pkg, "package.json"), `{"name":"hello-bin","version":"1.0.0","bin":{"hello-bin":"hello.js"}}`, 0o644)
	writeFile(t, filepath.Join(pkg, "hello.js"), "#!/usr/bin/env node\n"+
		`console.log("hello from node " + process.version + ", " + require("child_process").execSync("echo and sh").toString().trim())`+"\n", 0o755)
	for _, p := range []string{pkg, filepath.Join(pkg, "package.json"), filepath.Join(pkg, "hello.js")} {
		if err := os.Chown(p, 65532, 65532); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(t.Context(), "/usr/local/bin/npx", "--yes", "--offline", "/tmp/pkg")
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "NPM_CONFIG_UPDATE_NOTIFIER=false"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: dir, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hello from node v") || !strings.Contains(string(out), "and sh") {
		t.Errorf("npx in the node image's tree (chroot, uid 65532): %v\n%s", err, out)
	}
	t.Logf("npx in the node image's tree: %s", bytes.TrimSpace(out))
}

func writeFile(t *testing.T, name, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

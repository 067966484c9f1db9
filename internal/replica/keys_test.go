package replica

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// key returns a key of 32 or more bytes made of s.
func key(s string) []byte { return []byte(strings.Repeat(s, 32/len(s)+1)) }

func mustKeys(t *testing.T, signing []byte, accepted ...[]byte) *Keys {
	t.Helper()
	k, err := NewKeys(signing, accepted...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A key's id is the same in every Keys, differs between keys, and
// discloses nothing of the key; a key given twice is accepted once.
func TestKeyIDs(t *testing.T) {
	a, b := key("a"), key("b")
	k1 := mustKeys(t, a, b, a, b)
	k2 := mustKeys(t, b, a)
	if got := k1.AcceptedIDs(); len(got) != 2 || got[0] != k1.SigningID() || got[0] != k2.AcceptedIDs()[1] || got[1] != k2.SigningID() {
		t.Fatalf("ids %v and %v", k1.AcceptedIDs(), k2.AcceptedIDs())
	}
	if k1.SigningID() == k2.SigningID() {
		t.Fatal("two keys, one id")
	}
	id := k1.SigningID()
	if len(id) != 16 || strings.Contains(hex.EncodeToString(a), id) || strings.Contains(string(a), id) {
		t.Fatalf("id %q", id)
	}
	// The caller's slice is not the Keys'.
	ids := k1.AcceptedIDs()
	ids[0] = "x"
	if k1.SigningID() == "x" {
		t.Fatal("AcceptedIDs shares its slice")
	}
	// Nor are the caller's bytes.
	sig := key("c")
	k3 := mustKeys(t, sig)
	sig[0] = 'z'
	if k3.SigningID() != mustKeys(t, key("c")).SigningID() {
		t.Fatal("NewKeys keeps the caller's slice")
	}
}

func TestNewKeysRefusesShortKeys(t *testing.T) {
	if _, err := NewKeys(make([]byte, 31)); err == nil || err.Error() != "signing key: 31 bytes, needs at least 32" {
		t.Errorf("short signing key: %v", err)
	}
	if _, err := NewKeys(key("a"), key("b"), []byte("short")); err == nil || err.Error() != "accepted key 2: 5 bytes, needs at least 32" {
		t.Errorf("short accepted key: %v", err)
	}
	if _, err := NewKeys(make([]byte, 32)); err != nil {
		t.Errorf("32 bytes: %v", err)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// secretDir lays files out as the kubelet mounts a Secret: the files in
// a timestamped directory, "..data" a link to it, and each file a link
// to ..data/name.
func secretDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	version := "..2026_01_02_03_04_05.123456789"
	for name, content := range files {
		write(t, filepath.Join(dir, version, name), content)
		symlink(t, filepath.Join("..data", name), filepath.Join(dir, name))
	}
	symlink(t, version, filepath.Join(dir, "..data"))
	return dir
}

// A Secret mounted as the kubelet does: current signs, the others are
// accepted, white space around a key is not the key's, and the
// kubelet's own entries (and any dotfile) are not keys.
func TestLoadKeyDirKubelet(t *testing.T) {
	cur, prev := string(key("new")), string(key("old"))
	dir := secretDir(t, map[string]string{
		"current":  "  " + cur + "\n",
		"previous": prev + "\r\n",
	})
	write(t, filepath.Join(dir, ".hidden"), "short")                                  // would be refused if read
	write(t, filepath.Join(dir, "..2026_01_02_03_04_05.123456789", ".also"), "short") // likewise
	k, err := LoadKeyDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := mustKeys(t, []byte(cur), []byte(prev))
	if !slices.Equal(k.AcceptedIDs(), want.AcceptedIDs()) {
		t.Fatalf("ids %v, want %v", k.AcceptedIDs(), want.AcceptedIDs())
	}
}

// Each file's error names it as it is in dir, and says what is wrong.
func TestLoadKeyDirRefuses(t *testing.T) {
	dir := secretDir(t, map[string]string{"current": string(key("a")), "previous": "0123456789ab\n"})
	_, err := LoadKeyDir(dir)
	if want := "peer key " + filepath.Join(dir, "previous") + ": 12 bytes, needs at least 32"; err == nil || err.Error() != want {
		t.Errorf("a short key: %v; want %q", err, want)
	}

	dir = secretDir(t, map[string]string{"current": "   \n"})
	_, err = LoadKeyDir(dir)
	if want := "peer key " + filepath.Join(dir, "current") + ": 0 bytes, needs at least 32"; err == nil || err.Error() != want {
		t.Errorf("a blank key: %v; want %q", err, want)
	}

	dir = secretDir(t, map[string]string{"next": string(key("a"))})
	if _, err := LoadKeyDir(dir); err == nil || !strings.Contains(err.Error(), `no file named "current"`) || !strings.Contains(err.Error(), dir) {
		t.Errorf("no current: %v", err)
	}

	dir = t.TempDir()
	write(t, filepath.Join(dir, "current"), strings.Repeat("k", maxKeyFile+1))
	if _, err := LoadKeyDir(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "current")) {
		t.Errorf("a huge file: %v", err)
	}

	missing := filepath.Join(t.TempDir(), "nope")
	if _, err := LoadKeyDir(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("no directory: %v", err)
	}
}

// A plain directory works too; what is not a regular file is not a
// key, and a link to nothing (the kubelet removing a key) is skipped.
func TestLoadKeyDirPlain(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "current"), string(key("a")))
	write(t, filepath.Join(dir, "sub", "deeper"), "short")
	symlink(t, "nowhere", filepath.Join(dir, "gone"))
	symlink(t, "current", filepath.Join(dir, "alias")) // the same key: accepted once
	k, err := LoadKeyDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ids := k.AcceptedIDs(); len(ids) != 1 || ids[0] != mustKeys(t, key("a")).SigningID() {
		t.Fatalf("ids %v", ids)
	}
	// But a current that is not a file is an error.
	dir = t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "current"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyDir(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("current a directory: %v", err)
	}
}

// A reload while the kubelet updates the Secret reads one version: the
// one ..data names, even before the links of its new files are made.
func TestLoadKeyDirReadsOneVersion(t *testing.T) {
	dir := secretDir(t, map[string]string{"current": string(key("old"))})
	// The kubelet's update, halfway: a new version with a new current
	// and a previous, ..data switched, the previous link not yet made.
	write(t, filepath.Join(dir, "..v2", "current"), string(key("new")))
	write(t, filepath.Join(dir, "..v2", "previous"), string(key("old")))
	if err := os.Remove(filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	symlink(t, "..v2", filepath.Join(dir, "..data"))
	k, err := LoadKeyDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := mustKeys(t, key("new"), key("old")); !slices.Equal(k.AcceptedIDs(), want.AcceptedIDs()) {
		t.Fatalf("ids %v, want %v", k.AcceptedIDs(), want.AcceptedIDs())
	}
	if bytes.Equal(k.keys[0], key("old")) {
		t.Fatal("signs with the old key")
	}
}

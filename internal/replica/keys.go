package replica

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// MinKeyLen is the fewest bytes a peer key may have.
const MinKeyLen = 32

// maxKeyFile bounds what LoadKeyDir reads of one key file: a key is a
// line of text, and a huge file is a mistake, not a key.
const maxKeyFile = 64 << 10

// SigningFile is the name of the signing key's file in a key directory.
const SigningFile = "current"

// Keys is the set of peer keys in force: the signing key, which
// signs stamps and forwarding headers and whose CA signs this process's
// peer certificate, and the accepted keys (the signing key among them),
// any of which verifies what a peer made. A Keys never changes.
type Keys struct {
	keys [][]byte       // the signing key first; no two equal
	ids  []string       // keyID of each
	cas  []*peerCA      // the CA derived from each
	pool *x509.CertPool // every CA of cas
	macs []sync.Pool    // keyed HMACs of each key (forwardMAC)
}

// NewKeys returns the Keys that sign with signing and accept signing and
// each of accepted. A key repeated is accepted once. Each must have at
// least MinKeyLen bytes, taken as they are.
func NewKeys(signing []byte, accepted ...[]byte) (*Keys, error) {
	if err := checkLen(len(signing)); err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	k := &Keys{pool: x509.NewCertPool()}
	for i, key := range append([][]byte{signing}, accepted...) {
		if err := checkLen(len(key)); err != nil {
			return nil, fmt.Errorf("accepted key %d: %w", i, err)
		}
		if k.has(key) {
			continue
		}
		key = bytes.Clone(key)
		ca, err := deriveCA(key)
		if err != nil {
			return nil, err
		}
		k.keys = append(k.keys, key)
		k.ids = append(k.ids, keyID(key))
		k.cas = append(k.cas, ca)
		k.pool.AddCert(ca.cert)
	}
	k.macs = make([]sync.Pool, len(k.keys))
	return k, nil
}

func checkLen(n int) error {
	if n < MinKeyLen {
		return fmt.Errorf("%d bytes, needs at least %d", n, MinKeyLen)
	}
	return nil
}

func (k *Keys) has(key []byte) bool {
	for _, have := range k.keys {
		if hmac.Equal(have, key) {
			return true
		}
	}
	return false
}

// keyID names a key without disclosing it: the first 8 bytes of
// HMAC-SHA256(key, "mcpvisor key id"), in hex.
func keyID(key []byte) string {
	m := hmac.New(sha256.New, key)
	io.WriteString(m, "mcpvisor key id")
	return hex.EncodeToString(m.Sum(nil)[:8])
}

// SigningID is the id of the signing key, for logs and doctor: the same
// key gives the same id in every process. It is never the key.
func (k *Keys) SigningID() string { return k.ids[0] }

// AcceptedIDs are the ids of every accepted key, the signing key's first.
func (k *Keys) AcceptedIDs() []string { return append([]string(nil), k.ids...) }

// LoadKeyDir reads the peer keys from dir, a Kubernetes Secret mounted
// as a directory: the file named "current" is the signing key, and every
// other regular file whose name does not start with "." is an accepted
// key. Each file's content, with surrounding white space trimmed, is the
// key as it is (hex, base64 or raw bytes alike), and must have at least
// MinKeyLen bytes.
//
// The kubelet mounts a Secret as a directory of symbolic links into
// "..data", itself a link to a timestamped directory that an update
// replaces at once. When dir has a "..data", the keys are read from the
// directory it names, so that a reload during an update reads every file
// of one version; the files are named in errors as dir's.
func LoadKeyDir(dir string) (*Keys, error) {
	from := dir
	if _, err := os.Lstat(filepath.Join(dir, "..data")); err == nil {
		resolved, err := filepath.EvalSymlinks(filepath.Join(dir, "..data"))
		if err != nil {
			return nil, fmt.Errorf("peer keys %s: %w", dir, pathless(err))
		}
		from = resolved
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		return nil, fmt.Errorf("peer keys %s: %w", dir, pathless(err))
	}
	var signing []byte
	var accepted [][]byte
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		shown := filepath.Join(dir, name)
		key, err := readKeyFile(filepath.Join(from, name), name == SigningFile)
		switch {
		case err != nil:
			return nil, fmt.Errorf("peer key %s: %w", shown, err)
		case key == nil: // not a regular file
		case name == SigningFile:
			signing = key
		default:
			accepted = append(accepted, key)
		}
	}
	if signing == nil {
		return nil, fmt.Errorf("peer keys %s: no file named %q (the signing key)", dir, SigningFile)
	}
	return NewKeys(signing, accepted...)
}

// readKeyFile reads the key in path, following links. It returns nil
// and no error for what is not a regular file, or a link to nothing (a
// key the kubelet is removing), unless must: then that is an error.
func readKeyFile(path string, must bool) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !must {
			return nil, nil
		}
		return nil, pathless(err)
	}
	if !fi.Mode().IsRegular() {
		if must {
			return nil, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
		}
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, pathless(err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, pathless(err)
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("more than %d bytes, not a key", maxKeyFile)
	}
	b = bytes.TrimSpace(b)
	if err := checkLen(len(b)); err != nil {
		return nil, err
	}
	return b, nil
}

// pathless drops the path of a *fs.PathError: the message names the file
// already.
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

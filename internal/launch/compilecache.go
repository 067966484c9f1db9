package launch

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Node's module compile cache (Node 22.1 and later): with
// NODE_COMPILE_CACHE set to a directory, node keeps the V8 code of every
// CommonJS and ES module it compiles there, written when the process
// exits by itself, and the next start of the same files skips their
// compilation. npm turns it on for its own start (lib/cli.js), so the
// launcher as written gets it for npm but not for the server npm starts;
// a flattened start gets it for the server.
//
// The cache is keyed by node's version and each file's content: a node or
// a package updated in place compiles afresh. A node before 22.1 ignores
// the variable. Node never removes what it wrote: entries of a node
// version no longer run, or of files no longer there, stay;
// PruneCompileCache bounds what they take.
const (
	CompileCacheEnv        = "NODE_COMPILE_CACHE"
	DisableCompileCacheEnv = "NODE_DISABLE_COMPILE_CACHE"
)

// CompileCacheSetBy is the variable of a server's environment that
// decides what node does with its compile cache — NODE_COMPILE_CACHE or
// NODE_DISABLE_COMPILE_CACHE, set to any value —, or "" when neither is
// set; has says whether the environment sets a variable.
func CompileCacheSetBy(has func(key string) bool) string {
	for _, k := range []string{DisableCompileCacheEnv, CompileCacheEnv} {
		if has(k) {
			return k
		}
	}
	return ""
}

// PrunePolicy bounds a compile cache directory (PruneCompileCache).
type PrunePolicy struct {
	// MaxIdle: a node version's entries (the directory node keeps them
	// in, one per version and build) none of which was used for this long
	// are removed whole — that node is no longer run.
	MaxIdle time.Duration
	// MaxBytes: past this many bytes in all, the entries used longest
	// ago are removed until the rest fit. An entry still in use is
	// written again by the next process that compiles it.
	MaxBytes int64
}

// DefaultPrunePolicy is what mcpvisor keeps of the compile cache it gives
// flattened starts: a node version unused for 30 days goes, and the cache
// stays under 512 MiB (server-everything's modules take about 4.4 MB).
var DefaultPrunePolicy = PrunePolicy{MaxIdle: 30 * 24 * time.Hour, MaxBytes: 512 << 20}

// PruneResult is what PruneCompileCache removed.
type PruneResult struct {
	Files int   // entries removed
	Bytes int64 // their size
}

// PruneCompileCache bounds the compile cache in dir by p, as of now: it
// removes the directory of each node version none of whose entries was
// used within p.MaxIdle, then the entries used longest ago while the rest
// exceed p.MaxBytes. An entry's last use is the later of its access and
// modification times: node reads an entry it can use and leaves it as it
// is (it writes only entries it compiled afresh), and the access time is
// what a read moves (on a file system mounted noatime an entry in use is
// taken for idle, removed, and written again at the next exit of a server
// that uses it). A version's directory without entries — a node running
// for the first time makes it at start and writes its entries at exit —
// is removed only once it is itself that old. Within dir, only regular
// files and directories are looked at or removed: a symbolic link in it
// is neither followed nor removed. A dir that does not exist is an empty
// cache. It stops when ctx ends, returning ctx's error with what it
// removed by then.
func PruneCompileCache(ctx context.Context, dir string, now time.Time, p PrunePolicy) (PruneResult, error) {
	var res PruneResult
	tops, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	type entry struct {
		path string
		size int64
		used time.Time
	}
	var kept []entry
	var total int64
	var errs []error
	// remove removes e and reports whether it did (gone meanwhile: not
	// ours to count).
	remove := func(e entry) bool {
		err := os.Remove(e.path)
		switch {
		case err == nil:
			res.Files++
			res.Bytes += e.size
		case !errors.Is(err, fs.ErrNotExist):
			errs = append(errs, err)
		}
		return err == nil
	}
	for _, top := range tops {
		if !top.IsDir() { // a file or a link at the top: not node's
			continue
		}
		root := filepath.Join(dir, top.Name())
		var files []entry
		var dirs []string
		var newest time.Time
		werr := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			if d.IsDir() {
				dirs = append(dirs, path)
				return nil
			}
			if !d.Type().IsRegular() {
				return nil // a link, or anything else: left
			}
			info, err := d.Info()
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // removed meanwhile
				}
				return err
			}
			e := entry{path, info.Size(), lastUse(info)}
			files = append(files, e)
			if e.used.After(newest) {
				newest = e.used
			}
			return nil
		})
		if cerr := ctx.Err(); cerr != nil {
			return res, cerr
		}
		if werr != nil {
			errs = append(errs, werr)
			continue
		}
		var idle bool
		if len(files) > 0 {
			idle = now.Sub(newest) > p.MaxIdle
		} else {
			// Its modification time: made, or an entry added or removed
			// (listing it, as the walk just did, moves its access time).
			info, err := os.Lstat(root)
			idle = err == nil && now.Sub(info.ModTime()) > p.MaxIdle
		}
		if !idle {
			for _, e := range files {
				kept = append(kept, e)
				total += e.size
			}
			continue
		}
		for _, e := range files {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			remove(e)
		}
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i]) // deepest first; fails, as wanted, unless empty
		}
	}
	if total > p.MaxBytes {
		slices.SortFunc(kept, func(a, b entry) int { return a.used.Compare(b.used) })
		for _, e := range kept {
			if total <= p.MaxBytes {
				break
			}
			if err := ctx.Err(); err != nil {
				return res, err
			}
			if remove(e) {
				total -= e.size
			}
		}
	}
	return res, errors.Join(errs...)
}

// lastUse is when a cache entry was last used: the later of its access
// and modification times (accessTime: the modification time where the
// platform's is not read).
func lastUse(info fs.FileInfo) time.Time {
	if at := accessTime(info); at.After(info.ModTime()) {
		return at
	}
	return info.ModTime()
}

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
	// in, one per version and build) none of which was written for this
	// long are removed whole — that node is no longer run.
	MaxIdle time.Duration
	// MaxBytes: past this many bytes in all, the entries written longest
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
// removes the directories of node versions idle for p.MaxIdle, then the
// oldest entries while the rest exceed p.MaxBytes, then directories left
// empty. Only regular files and directories in dir are looked at or
// removed; a symbolic link is neither followed nor removed. A directory
// that does not exist is an empty cache. It stops when ctx ends,
// returning ctx's error with what it removed by then.
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
		path  string
		size  int64
		mtime time.Time
	}
	var kept []entry
	var total int64
	remove := func(e entry) error {
		if err := os.Remove(e.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		res.Files++
		res.Bytes += e.size
		return nil
	}
	var errs []error
	for _, top := range tops {
		if !top.IsDir() { // a file or a link at the top: not node's
			continue
		}
		var files []entry
		var newest time.Time
		werr := filepath.WalkDir(filepath.Join(dir, top.Name()), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			if !d.Type().IsRegular() {
				return nil // directories are walked, links and the rest left
			}
			info, err := d.Info()
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // removed meanwhile
				}
				return err
			}
			files = append(files, entry{path, info.Size(), info.ModTime()})
			if info.ModTime().After(newest) {
				newest = info.ModTime()
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
		if len(files) > 0 && now.Sub(newest) > p.MaxIdle {
			for _, e := range files {
				if err := remove(e); err != nil {
					errs = append(errs, err)
				}
			}
			continue
		}
		for _, e := range files {
			kept = append(kept, e)
			total += e.size
		}
	}
	if total > p.MaxBytes {
		slices.SortFunc(kept, func(a, b entry) int { return a.mtime.Compare(b.mtime) })
		for _, e := range kept {
			if total <= p.MaxBytes {
				break
			}
			if err := ctx.Err(); err != nil {
				return res, err
			}
			if err := remove(e); err != nil {
				errs = append(errs, err)
				continue
			}
			total -= e.size
		}
	}
	removeEmptyDirs(dir, tops)
	return res, errors.Join(errs...)
}

// removeEmptyDirs removes the directories under dir's top-level ones
// (tops, as read) that are empty, deepest first, and then those top-level
// ones left empty. Best effort: a directory node writes into meanwhile is
// not empty, and stays.
func removeEmptyDirs(dir string, tops []fs.DirEntry) {
	for _, top := range tops {
		if !top.IsDir() {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(dir, top.Name()), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i]) // fails, as wanted, unless empty
		}
	}
}

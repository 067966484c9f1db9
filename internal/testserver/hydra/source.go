package hydra

import (
	"os"
	"path/filepath"
	"runtime"
)

// sourceDir is this package's source directory, "" if it is not known.
func sourceDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	dir := filepath.Dir(file)
	if _, err := os.Stat(dir); err != nil {
		return ""
	}
	return dir
}

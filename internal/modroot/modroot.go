// Package modroot finds the module's root directory from a test's working
// directory (go test runs each package's tests in its own directory), for
// the tools make test installs under .tools/.
package modroot

import (
	"os"
	"path/filepath"
)

// Dir walks up from the working directory to the directory holding
// go.mod; "" if there is none.
func Dir() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

package main

import (
	"os"
	"path/filepath"
	"testing"
)

// fileWriter returns a function that writes src to name under dir (its
// directories made as needed) and returns the file's path, failing t on
// any error.
func fileWriter(t *testing.T, dir string) func(name, src string) string {
	return func(name, src string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

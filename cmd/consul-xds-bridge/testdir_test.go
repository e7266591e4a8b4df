package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestTestCommandDirectory: `test DIR` reads the directory's *.hcl files,
// sorted, as `validate DIR` and `run -config DIR` do, so a policy kept as
// a directory is tested as it is served; a directory without one is a
// usage error, as for the other commands.
func TestTestCommandDirectory(t *testing.T) {
	dir := t.TempDir()
	write := fileWriter(t, dir)
	pol := write("edge/policy.hcl", cmdTestPolicy)
	pass := write("edge/pass.test.hcl", cmdPassingTests)
	// Not *.hcl: not read as configuration.
	cat := write("edge/catalog.json", cmdCatalog)
	fail := write("failing/fail.test.hcl", cmdFailingTests)
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}

	tests := map[string]cliCase{
		"a directory": {
			args:     []string{"test", "-catalog", cat, filepath.Dir(pol)},
			wantCode: 0,
			wantOut: []string{
				"PASS " + pass + `:1:1: canary header goes to v2 -> route ` + pol + `:12:7 in virtual host "shop": cluster "api.v2"`,
				"PASS " + pass + `:18:1: the rest goes to web -> route ` + pol + `:23:7`,
				"2 passed, 0 failed",
			},
		},
		"a file and a directory": {
			args:     []string{"test", pol, filepath.Dir(fail)},
			wantCode: 1,
			wantOut: []string{
				"FAIL " + fail + `:1:1: canary header goes to v2 -> route ` + pol + `:12:7`,
				"0 passed, 1 failed",
			},
		},
		"a directory without *.hcl": {
			args:     []string{"test", pol, empty},
			wantCode: 2,
			wantErr:  []string{"test: directory " + empty + " has no *.hcl file"},
		},
	}
	for name, tc := range tests {
		t.Run(name, tc.run)
	}
}

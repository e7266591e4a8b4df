package main

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/modroot"
)

// module is this module's import path: the packages "of ours".
const module = "github.com/consul-xds-bridge/consul-xds-bridge"

// TestArchitectureLayering holds the layering docs/architecture.md
// describes to what the packages import (go list, without their tests):
//   - model is pure: it imports no package that does I/O (its direct
//     imports; what it gets through consul and policy are their types);
//   - ir imports nothing of ours, directly or through anything else;
//   - agent relays worlds and builds none: neither directly nor through
//     anything else does it import pipeline, bridge or model.
func TestArchitectureLayering(t *testing.T) {
	type pkg struct {
		ImportPath string
		Imports    []string // direct, non-test
		Deps       []string // transitive, non-test
	}
	cmd := exec.Command("go", "list", "-json", "./model", "./ir", "./agent")
	cmd.Dir = modroot.Dir()
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[strings.TrimPrefix(p.ImportPath, module+"/")] = p
	}

	tests := map[string]struct {
		pkg string
		// list picks the imports checked; forbidden, which of them break rule.
		list      func(pkg) []string
		forbidden func(path string) bool
		rule      string
	}{
		"model does no I/O": {
			pkg:  "model",
			list: func(p pkg) []string { return p.Imports },
			forbidden: func(path string) bool {
				return slices.Contains([]string{"os", "net", "net/http", "os/exec", "io/ioutil"}, path)
			},
			rule: "model.Build is pure (no I/O): it may not import os, net, net/http, os/exec or io/ioutil",
		},
		"ir imports nothing of ours": {
			pkg:  "ir",
			list: func(p pkg) []string { return p.Deps },
			forbidden: func(path string) bool {
				return path == module || strings.HasPrefix(path, module+"/")
			},
			rule: "ir is the bottom layer: it may depend on no package of this module",
		},
		"agent builds no world": {
			pkg:  "agent",
			list: func(p pkg) []string { return p.Deps },
			forbidden: func(path string) bool {
				rel, ours := strings.CutPrefix(path, module+"/")
				if !ours {
					return false
				}
				for _, layer := range []string{"pipeline", "bridge", "model"} {
					if rel == layer || strings.HasPrefix(rel, layer+"/") {
						return true
					}
				}
				return false
			},
			rule: "the agent relays what the central bridge computed: it may not depend on pipeline, bridge or model",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, ok := pkgs[tc.pkg]
			if !ok {
				t.Fatalf("go list did not list %s: %v", tc.pkg, pkgs)
			}
			if len(p.Deps) == 0 {
				t.Fatalf("go list gave %s no dependencies: the check would pass vacuously", tc.pkg)
			}
			var bad []string
			for _, path := range tc.list(p) {
				if tc.forbidden(path) && path != p.ImportPath {
					bad = append(bad, path)
				}
			}
			if len(bad) > 0 {
				t.Errorf("%s imports %v\n(%s; docs/architecture.md)", tc.pkg, bad, tc.rule)
			}
		})
	}
}

package model_test

import (
	"bytes"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/golden"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// TestGolden runs every case in testdata/<case>/ (catalog.json in Consul's
// own API shape, and policy.hcl if present, with the TLS files it names
// relative to itself) through Build and compares the model's JSON with
// testdata/<case>/model.golden.json and the warnings with
// testdata/<case>/warnings.golden.txt. The model goldens are the input of
// the next stage: xds's golden test translates them.
func TestGolden(t *testing.T) {
	for _, dir := range caseDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			_, warnings, b := buildCase(t, dir)
			golden.Compare(t, filepath.Join(dir, golden.ModelFile), b, *update)
			golden.Compare(t, filepath.Join(dir, "warnings.golden.txt"), []byte(strings.Join(warnings, "\n")+"\n"), *update)
		})
	}
}

// TestGoldenRoundTrip: for every case, the built model encoded as in the
// golden file and decoded again (private keys given back from the case's
// files) is the built model, so what xds's golden test translates is
// exactly what Build returned. The encoding carries no private key.
func TestGoldenRoundTrip(t *testing.T) {
	for _, dir := range caseDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			m, _, b := buildCase(t, dir)
			got, err := golden.DecodeModel(b, dir)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m, got) {
				t.Fatalf("decoded model differs (-built +decoded):\n%s",
					cmp.Diff(m, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })))
			}
			for _, s := range secrets(m) {
				if len(s.PrivateKey) > 0 && bytes.Contains(b, s.PrivateKey) {
					t.Errorf("the JSON of secret %q carries its private key", s.Name)
				}
			}
		})
	}
}

func secrets(m *ir.Model) []ir.Secret {
	out := m.Secrets
	for _, g := range m.Groups {
		out = append(out, g.Secrets...)
	}
	return out
}

func caseDirs(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob("testdata/*/catalog.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden cases found: %v", err)
	}
	dirs := make([]string, len(paths))
	for i, p := range paths {
		dirs[i] = filepath.Dir(p)
	}
	return dirs
}

// buildCase builds the model of the case in dir, and encodes it as the
// golden file has it.
func buildCase(t *testing.T, dir string) (*ir.Model, []string, []byte) {
	t.Helper()
	cat, err := consul.ReadFixtureFile(filepath.Join(dir, "catalog.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pol *policy.Policy
	if src, err := os.ReadFile(filepath.Join(dir, "policy.hcl")); err == nil {
		doc, diags := policy.Parse("policy.hcl", src)
		if diags.HasErrors() {
			t.Fatalf("policy: %v", diags)
		}
		cfg, diags := policy.Merge(doc)
		if diags.HasErrors() {
			t.Fatalf("policy: %v", diags)
		}
		pol = cfg.Policy
		// TLS files are named relative to policy.hcl, which the case
		// directory holds; paths never reach the goldens.
		if diags := readFilesIn(t, dir, pol); diags.HasErrors() {
			t.Fatalf("policy files: %v", diags)
		}
	}
	m, warnings := model.Build(cat, pol)
	b, err := golden.MarshalModel(m)
	if err != nil {
		t.Fatal(err)
	}
	return m, warnings, b
}

// readFilesIn reads the policy's TLS files from dir, where the case's
// policy.hcl (parsed under that bare name, so that goldens do not depend
// on where the repository is) names them relative to itself.
func readFilesIn(t *testing.T, dir string, pol *policy.Policy) hcl.Diagnostics {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range pol.Files() {
		if !filepath.IsAbs(f.Path) {
			f.Path = filepath.Join(abs, f.Path)
		}
	}
	for _, p := range pol.Proxies {
		for _, l := range p.Listeners {
			for _, f := range l.JWKSFiles {
				if !filepath.IsAbs(f.Path) {
					f.Path = filepath.Join(abs, f.Path)
				}
			}
		}
	}
	return pol.ReadFiles(time.Now())
}

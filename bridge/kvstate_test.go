package bridge

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
)

// TestKVState: the state file round-trips and is ignored for another
// prefix; patchKV replaces exactly the broken documents (unparsable, over
// a limit, or named by the rejection's diagnostics) by their last
// accepted versions, keeps the others current, and keeps key order.
func TestKVState(t *testing.T) {
	dir := t.TempDir()
	accepted := []consul.KVDocument{
		{Key: "p/a.hcl", Value: []byte(`service "a" {}`)},
		{Key: "p/b.hcl", Value: []byte(`service "b" {}`)},
		{Key: "p/c.hcl", Value: []byte(`service "c" {}`)},
	}
	if err := saveKVState(dir, "p/", accepted); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, kvStateFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v, mode %v; want 0600", err, fi.Mode())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in the state dir, want the state file alone (no temporary left)", len(entries))
	}
	if st, err := loadKVState(dir, "other/"); st != nil || err != nil {
		t.Errorf("state for another prefix = %v, %v; want none", st, err)
	}
	st, err := loadKVState(dir, "p/")
	if err != nil || st == nil || len(st.Documents) != 3 {
		t.Fatalf("loaded %v, %v", st, err)
	}
	cur := &consul.KVUpdate{
		Documents: []consul.KVDocument{
			{Key: "p/a.hcl", Value: []byte(`service "a" { lb_policy = "nope" }`)}, // parses, rejected later
			{Key: "p/c.hcl", Value: []byte(`service "c" {`)},                      // does not parse
			{Key: "p/d.hcl", Value: []byte(`service "d" {}`)},                     // new since
		},
		Rejected: []string{"p/b.hcl: 2000000 bytes is over the limit of 1048576"},
	}
	got, replaced := patchKV(cur, st, map[string]bool{"p/a.hcl": true})
	var keys []string
	for _, d := range got.Documents {
		keys = append(keys, d.Key+"="+string(d.Value))
	}
	want := []string{`p/a.hcl=service "a" {}`, `p/b.hcl=service "b" {}`, `p/c.hcl=service "c" {}`, `p/d.hcl=service "d" {}`}
	if !slices.Equal(keys, want) {
		t.Errorf("patched documents %q, want %q", keys, want)
	}
	slices.Sort(replaced)
	if !slices.Equal(replaced, []string{"p/a.hcl", "p/b.hcl", "p/c.hcl"}) || len(got.Rejected) != 0 {
		t.Errorf("replaced %v, rejected %v", replaced, got.Rejected)
	}
}

package consul

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"
)

const kvPath = "/v1/kv/xds/policy/"

func kvPair(key, value string, modify uint64) *api.KVPair {
	return &api.KVPair{Key: key, Value: []byte(value), CreateIndex: 1, ModifyIndex: modify}
}

func startKV(t *testing.T, c *api.Client, cfg KVConfig) *KVWatcher {
	cfg.Client, cfg.Query, cfg.Logger = c, testQuery(), zerolog.New(zerolog.NewTestWriter(t))
	if cfg.Prefix == "" {
		cfg.Prefix = "xds/policy/"
	}
	w := NewKVWatcher(cfg)
	runInBackground(t, w.Run)
	return w
}

// nextKV waits for an update satisfying pred, failing after a generous bound.
func nextKV(t *testing.T, w *KVWatcher, what string, pred func(KVUpdate) bool) KVUpdate {
	t.Helper()
	return awaitUpdate(t, w.Updates(), 10*time.Second, what, pred)
}

// docs renders documents as "key=value,..." with the test prefix cut off.
func docs(u KVUpdate) string {
	var out []string
	for _, d := range u.Documents {
		out = append(out, strings.TrimPrefix(d.Key, "xds/policy/")+"="+string(d.Value))
	}
	return strings.Join(out, ",")
}

// noKVUpdate fails if w publishes anything during d.
func noKVUpdate(t *testing.T, w *KVWatcher, d time.Duration, why string) {
	t.Helper()
	select {
	case u := <-w.Updates():
		t.Fatalf("%s: got update %q (index %d, rejected %v)", why, docs(u), u.Index, u.Rejected)
	case <-time.After(d):
	}
}

func TestKVWatcherFollowsChanges(t *testing.T) {
	f, c := newFakeConsul(t)
	f.set(kvPath, 10, api.KVPairs{
		kvPair("xds/policy/b.hcl", "B", 9),
		kvPair("xds/policy/", "", 1), // a folder, as the UI creates
		kvPair("xds/policy/a.hcl", "A", 10),
	})
	// Failures before the first read must not surface as an empty set.
	f.failNext(kvPath, 2)
	w := startKV(t, c, KVConfig{})

	u := nextKV(t, w, "first update", func(KVUpdate) bool { return true })
	if got := docs(u); got != "a.hcl=A,b.hcl=B" {
		t.Fatalf("documents = %q, want a.hcl=A,b.hcl=B", got)
	}
	if u.Index != 10 || u.Documents[0].ModifyIndex != 10 || len(u.Rejected) != 0 {
		t.Fatalf("index %d, a.hcl modify index %d, rejected %v", u.Index, u.Documents[0].ModifyIndex, u.Rejected)
	}

	f.set(kvPath, 11, api.KVPairs{kvPair("xds/policy/a.hcl", "A", 10), kvPair("xds/policy/b.hcl", "B2", 11)})
	u = nextKV(t, w, "b.hcl changed", func(KVUpdate) bool { return true })
	if got := docs(u); got != "a.hcl=A,b.hcl=B2" || u.Index != 11 {
		t.Fatalf("after changing b.hcl: %q at index %d", got, u.Index)
	}

	// `consul kv put` of the same value moves the indexes, not the policy.
	f.set(kvPath, 12, api.KVPairs{kvPair("xds/policy/a.hcl", "A", 12), kvPair("xds/policy/b.hcl", "B2", 11)})
	noKVUpdate(t, w, 300*time.Millisecond, "unchanged rewrite")

	f.set(kvPath, 13, api.KVPairs{kvPair("xds/policy/a.hcl", "A", 12)})
	u = nextKV(t, w, "b.hcl deleted", func(KVUpdate) bool { return true })
	if got := docs(u); got != "a.hcl=A" {
		t.Fatalf("after deleting b.hcl: %q", got)
	}

	// Consul answers 404 once the last key is gone.
	f.set(kvPath, 14, notFound{})
	u = nextKV(t, w, "all deleted", func(KVUpdate) bool { return true })
	if len(u.Documents) != 0 || u.Index != 14 {
		t.Fatalf("after deleting everything: %q at index %d", docs(u), u.Index)
	}
}

func TestKVWatcherKeepsLastGoodOnErrors(t *testing.T) {
	f, c := newFakeConsul(t)
	f.set(kvPath, 10, api.KVPairs{kvPair("xds/policy/a.hcl", "A", 10)})
	w := startKV(t, c, KVConfig{})
	nextKV(t, w, "first update", func(KVUpdate) bool { return true })

	f.failNext(kvPath, 5)
	f.set(kvPath, 11, api.KVPairs{kvPair("xds/policy/a.hcl", "A", 10)}) // wakes the query into the failures
	noKVUpdate(t, w, 500*time.Millisecond, "during errors")

	f.set(kvPath, 12, api.KVPairs{kvPair("xds/policy/a.hcl", "A2", 12)})
	u := nextKV(t, w, "change after recovery", func(KVUpdate) bool { return true })
	if got := docs(u); got != "a.hcl=A2" {
		t.Fatalf("after recovery: %q", got)
	}
	if after := len(fromFirstFailure(f.requests(kvPath))); after < 6 {
		t.Fatalf("%d requests since the failures began, want 5 failures and a success", after)
	}
}

func TestKVWatcherEmptyPrefixIsAnUpdate(t *testing.T) {
	f, c := newFakeConsul(t)
	f.set(kvPath, 5, notFound{})
	w := startKV(t, c, KVConfig{})
	u := nextKV(t, w, "first update", func(KVUpdate) bool { return true })
	if u.Documents == nil || len(u.Documents) != 0 || u.Index != 5 {
		t.Fatalf("empty prefix: documents %v at index %d", u.Documents, u.Index)
	}
	f.set(kvPath, 6, notFound{}) // a write elsewhere moves the index
	noKVUpdate(t, w, 300*time.Millisecond, "still empty")

	f.set(kvPath, 7, api.KVPairs{kvPair("xds/policy/a.hcl", "A", 7)})
	u = nextKV(t, w, "first document", func(KVUpdate) bool { return true })
	if got := docs(u); got != "a.hcl=A" {
		t.Fatalf("documents = %q", got)
	}
}

func TestKVWatcherLimits(t *testing.T) {
	tests := map[string]struct {
		cfg          KVConfig
		pairs        api.KVPairs
		wantDocs     string
		wantRejected []string
	}{
		"oversize value": {
			cfg:          KVConfig{MaxDocumentBytes: 4},
			pairs:        api.KVPairs{kvPair("xds/policy/a.hcl", "12345", 1), kvPair("xds/policy/b.hcl", "1234", 1)},
			wantDocs:     "b.hcl=1234",
			wantRejected: []string{"xds/policy/a.hcl: 5 bytes is over the limit of 4"},
		},
		"default size limit": {
			pairs:        api.KVPairs{kvPair("xds/policy/big.hcl", strings.Repeat("x", DefaultMaxDocumentBytes+1), 1)},
			wantDocs:     "",
			wantRejected: []string{"xds/policy/big.hcl: 1048577 bytes is over the limit of 1048576"},
		},
		"too many documents": {
			cfg: KVConfig{MaxDocuments: 2},
			pairs: api.KVPairs{
				kvPair("xds/policy/c.hcl", "C", 1), kvPair("xds/policy/b.hcl", "B", 1),
				kvPair("xds/policy/dir/", "", 1), kvPair("xds/policy/a.hcl", "A", 1),
			},
			wantDocs:     "a.hcl=A,b.hcl=B",
			wantRejected: []string{`xds/policy/c.hcl: more than 2 documents under "xds/policy/"`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, c := newFakeConsul(t)
			f.set(kvPath, 3, tc.pairs)
			w := startKV(t, c, tc.cfg)
			u := nextKV(t, w, "first update", func(KVUpdate) bool { return true })
			if got := docs(u); got != tc.wantDocs {
				t.Errorf("documents = %q, want %q", got, tc.wantDocs)
			}
			if strings.Join(u.Rejected, "\n") != strings.Join(tc.wantRejected, "\n") {
				t.Errorf("rejected = %q, want %q", u.Rejected, tc.wantRejected)
			}
		})
	}
}

func TestKVWatcherRejectionEndsWhenTheDocumentShrinks(t *testing.T) {
	f, c := newFakeConsul(t)
	f.set(kvPath, 3, api.KVPairs{kvPair("xds/policy/a.hcl", "12345", 3)})
	w := startKV(t, c, KVConfig{MaxDocumentBytes: 4})
	u := nextKV(t, w, "first update", func(KVUpdate) bool { return true })
	if len(u.Documents) != 0 || len(u.Rejected) != 1 {
		t.Fatalf("documents %q, rejected %q", docs(u), u.Rejected)
	}
	f.set(kvPath, 4, api.KVPairs{kvPair("xds/policy/a.hcl", "1234", 4)})
	u = nextKV(t, w, "accepted", func(KVUpdate) bool { return true })
	if docs(u) != "a.hcl=1234" || len(u.Rejected) != 0 {
		t.Fatalf("documents %q, rejected %q", docs(u), u.Rejected)
	}
}

func TestKVWatcherRefusesEmptyPrefix(t *testing.T) {
	_, c := newFakeConsul(t)
	w := NewKVWatcher(KVConfig{Client: c})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Run(ctx); err == nil {
		t.Fatal("Run with an empty prefix returned nil, want an error")
	}
}

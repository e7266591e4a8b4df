package consul

import (
	"slices"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

func TestKVWatcherAgainstConsul(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	c := agent.Client()
	put := func(key, value string) {
		t.Helper()
		if _, err := c.KV().Put(&api.KVPair{Key: key, Value: []byte(value)}, nil); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	put("xds/policy/", "") // a folder
	put("xds/policy/b.hcl", "B")
	put("xds/policy/a.hcl", "A")
	put("xds/policy-old/c.hcl", "C") // shares the string prefix, not the folder
	w := startKV(t, c, KVConfig{Prefix: "xds/policy/"})

	u := nextKV(t, w, "both documents", func(u KVUpdate) bool { return docs(u) == "a.hcl=A,b.hcl=B" })
	if u.Index == 0 || u.Documents[0].ModifyIndex == 0 {
		t.Fatalf("indexes missing: update %d, a.hcl %d", u.Index, u.Documents[0].ModifyIndex)
	}
	if _, err := c.KV().Delete("xds/policy/b.hcl", nil); err != nil {
		t.Fatal(err)
	}
	nextKV(t, w, "b.hcl gone", func(u KVUpdate) bool { return docs(u) == "a.hcl=A" })
	if _, err := c.KV().DeleteTree("xds/policy/", nil); err != nil {
		t.Fatal(err)
	}
	nextKV(t, w, "empty", func(u KVUpdate) bool { return len(u.Documents) == 0 })
}

func TestWatcherTargetsAgainstConsul(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 8080, nil, nil)
	remote := ServiceKey{Datacenter: "dc9", Name: "api"} // no such datacenter
	w := NewWatcher(Config{
		Client: agent.Client(), Query: testQuery(), Logger: zerolog.New(zerolog.NewTestWriter(t)),
		Targets: Targets{Services: []ServiceKey{{Name: "web"}, {Name: "ghost"}, remote}},
	})
	runInBackground(t, w.Run)

	u := next(t, w, "complete with web", func(u Update) bool {
		return u.Complete && instanceIDs(u.Catalog, "web") == "web-1=passing"
	})
	if s := u.Catalog.Service("", "ghost"); s == nil || len(s.Instances) != 0 {
		t.Fatalf("unregistered target = %+v, want present and empty", s)
	}
	if s := u.Catalog.Service("dc9", "api"); s == nil || len(s.Instances) != 0 || !slices.Equal(u.Unreachable, []ServiceKey{remote}) {
		t.Fatalf("api@dc9 = %+v, unreachable = %v", s, u.Unreachable)
	}
	if u.Catalog.Service("", "consul") != nil {
		t.Fatal("the consul service is watched without AllLocal")
	}

	w.SetTargets(Targets{AllLocal: true})
	u = next(t, w, "all local", func(u Update) bool { return u.Complete && u.Catalog.Service("", "consul") != nil })
	if u.Catalog.Service("", "ghost") != nil || u.Catalog.Service("dc9", "api") != nil || len(u.Unreachable) != 0 {
		t.Fatalf("dropped targets still served: %+v", u.Catalog.Services)
	}
}

// TestUnqueryableServiceNamesAreSkipped: Consul registers services whose
// names its own HTTP API cannot serve ("..": 404, a tab: 400); watching
// every local service, they are skipped and reported, and the catalog is
// complete without them (their watch could never be read).
func TestUnqueryableServiceNamesAreSkipped(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 8080, nil, nil)
	agent.RegisterTTL(t, "bad\tname", "bad-1", 8081, nil, nil)
	w := NewWatcher(Config{Client: agent.Client(), Query: testQuery(), Logger: zerolog.New(zerolog.NewTestWriter(t)), Targets: Targets{AllLocal: true}})
	runInBackground(t, w.Run)
	u := next(t, w, "complete with web", func(u Update) bool {
		return u.Complete && instanceIDs(u.Catalog, "web") == "web-1=passing"
	})
	if !slices.Equal(u.Skipped, []string{"bad\tname"}) || u.Catalog.Service("", "bad\tname") != nil {
		t.Errorf("skipped = %q, bad service in catalog %v; want it skipped", u.Skipped, u.Catalog.Service("", "bad\tname") != nil)
	}
	for name, want := range map[string]bool{"web": true, "api.v2": true, "my_svc-1": true, "..": false, ".": false, "a/b": false, "bad\tname": false, "": false, "ümlaut": false} {
		if got := ir.QueryableServiceName(name); got != want {
			t.Errorf("QueryableServiceName(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestWatcherSaysWhatChanged: against a real Consul, a health flip of one
// instance arrives as "web's endpoints changed" and nothing else, so the
// stages after the watcher need not rediscover it; a new target is a
// change of structure.
func TestWatcherSaysWhatChanged(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 8080, nil, nil)
	agent.RegisterTTL(t, "api", "api-1", 9090, nil, nil)
	w := NewWatcher(Config{
		Client: agent.Client(), Query: testQuery(), Logger: zerolog.New(zerolog.NewTestWriter(t)),
		Targets: Targets{Services: []ServiceKey{{Name: "web"}, {Name: "api"}}},
	})
	runInBackground(t, w.Run)
	u := next(t, w, "complete", func(u Update) bool { return u.Complete })
	if u.Changed.EndpointsOnly() {
		t.Errorf("the first complete catalog claims only endpoints changed: %+v", u.Changed)
	}

	agent.SetTTL(t, "service:web-1", "critical")
	u = next(t, w, "web critical", func(u Update) bool { return instanceIDs(u.Catalog, "web") == "web-1=critical" })
	if !u.Changed.EndpointsOnly() || !slices.Equal(u.Changed.Services, []ServiceKey{{Name: "web"}}) {
		t.Errorf("a health flip of web arrived as %+v, want web's endpoints only", u.Changed)
	}

	w.SetTargets(Targets{Services: []ServiceKey{{Name: "web"}, {Name: "api"}, {Name: "db"}}})
	u = next(t, w, "db read", func(u Update) bool { return u.Complete && u.Catalog.Service("", "db") != nil })
	if u.Changed.EndpointsOnly() {
		t.Errorf("a new target arrived as endpoints-only: %+v", u.Changed)
	}
}

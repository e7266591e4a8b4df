package bench

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// TestFollowOneWorld: the follow-one policy loads, group f00S routes to
// service S alone, proxy k follows service k mod U, flips go round the
// routed services, and the peer's sidecar k has the same one upstream.
func TestFollowOneWorld(t *testing.T) {
	const u = 5
	path := filepath.Join(t.TempDir(), "p.hcl")
	if err := os.WriteFile(path, []byte(FollowOnePolicy(true, u)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, diags := policy.LoadFiles(path)
	if diags.HasErrors() {
		t.Fatalf("follow-one policy: %s", diags.Error())
	}
	groups := map[string][]string{}
	for _, p := range cfg.Policy.Proxies {
		for _, l := range p.Listeners {
			for _, vh := range l.VirtualHosts {
				for _, rt := range vh.Routes {
					for _, tg := range rt.Targets {
						groups[p.Name] = append(groups[p.Name], tg.Service)
					}
				}
			}
		}
	}
	for s := 0; s < u; s++ {
		if got := groups[followGroup(s)]; len(got) != 1 || got[0] != ServiceName(s) {
			t.Errorf("group %s routes to %v, want [%s]", followGroup(s), got, ServiceName(s))
		}
	}
	if got := len(groups["bench"]); got != u {
		t.Errorf("group bench routes to %d services, want %d (the baseline's)", got, u)
	}
	r := &run{opts: &Options{Upstreams: u, FollowOne: true}}
	for k := 0; k < 3*u; k++ {
		if r.followed(k) != k%u || r.flipService(k) != k%u {
			t.Fatalf("proxy/flip %d: follows %d, flips %d; want %d", k, r.followed(k), r.flipService(k), k%u)
		}
		if ups := sidecarUpstreams(k, u, true); len(ups) != 1 || ups[0] != k%u {
			t.Fatalf("sidecar %d upstreams %v, want [%d]", k, ups, k%u)
		}
	}
	r.opts.FollowOne = false
	if r.flipService(3) != 0 || len(sidecarUpstreams(3, u, false)) != u {
		t.Fatal("without -follow-one every flip is service 0 and every sidecar has every upstream")
	}
}

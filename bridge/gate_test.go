package bridge

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

const gatePolicy = `export_all_services = true
service "web" {
  connect_timeout = "%s"
}
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      domains = ["*"]
      route {
        match {
          path_prefix = "/"
        }
        service = "web"%s
      }
    }
  }
}
`

// gateHarness runs the loop on a policy file that tests rewrite.
func gateHarness(t *testing.T) (*loopHarness, string) {
	file := filepath.Join(t.TempDir(), "policy.hcl")
	write := func(timeout, extra string) {
		if err := os.WriteFile(file, []byte(fmt.Sprintf(gatePolicy, timeout, extra)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("1s", "")
	h := startLoopWith(t, func(c *Config, l *loop) {
		cfg, _, diags := policy.LoadFiles(file)
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		c.ConfigFiles, c.Policy, l.policy = []string{file}, cfg.Policy, cfg.Policy
		l.watcher = consul.NewWatcher(consul.Config{}) // never run: it only takes the reloads' targets
	})
	return h, file
}

// servedObjects is the cluster web and listener edge.http of a world.
func servedObjects(t *testing.T, w *pipeline.World) (any, any) {
	t.Helper()
	var cluster, listener any
	for _, c := range w.Output.Shared.Clusters {
		if c.GetName() == "web" {
			cluster = c
		}
	}
	if g := w.Output.Groups["edge"]; g != nil {
		for _, l := range g.Listeners {
			if xds.ResourceName(l) == "edge.http" {
				listener = l
			}
		}
	}
	if cluster == nil || listener == nil {
		t.Fatalf("world without cluster web or listener edge.http")
	}
	return cluster, listener
}

// TestRejectedReloadLeavesServedMemory: the reload gate computes a
// candidate on a fork of the daemon's memo. A candidate whose shared
// resources translate (web's cluster with another timeout) but whose
// group does not (a header value Envoy refuses) is rejected, and the next
// build under the last good policy finds the memo as it was: web's
// cluster and edge's listener are the very objects served before, not
// rebuilt from a memory the candidate overwrote. (With the gate on the
// daemon's own memo, web's cluster is rebuilt, and a failing group would
// fall back on the candidate's reach.)
func TestRejectedReloadLeavesServedMemory(t *testing.T) {
	h, file := gateHarness(t)
	h.send(8001)
	h.eventually("the first build", func() bool { return h.builds() == 1 })
	cluster, listener := servedObjects(t, h.world.Load())

	bad := fmt.Sprintf(gatePolicy, "2s", "\n        request_headers {\n          set = { \"x-a\" = \"a\\nb\" }\n        }")
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	h.d.Reload()
	h.eventually("the rejection", func() bool { return h.d.Policy().FailedReloads == 1 })

	h.clock.Advance(h.d.cfg.Settings.XDS.DebounceHoldOff)
	h.sendChange(8002, consul.Change{Services: []consul.ServiceKey{{Name: "web"}}, Endpoints: true})
	h.eventually("the build after the rejection", func() bool { return h.builds() == 2 })
	w := h.world.Load()
	c2, l2 := servedObjects(t, w)
	if c2 != cluster {
		t.Error("web's cluster was rebuilt after a rejected reload: the candidate changed the served memo")
	}
	if l2 != listener {
		t.Error("edge's listener was rebuilt after a rejected reload: the candidate changed the served memo")
	}
	if !w.EndpointsOnly {
		t.Error("a health change after a rejected reload did not arrive as endpoints-only")
	}
}

// TestAChangeCarriesWhatChanged: the watcher's "these services'
// instances changed" reaches the pipeline; a policy reload in between
// widens it to anything.
func TestAChangeCarriesWhatChanged(t *testing.T) {
	h, file := gateHarness(t)
	h.send(8001)
	h.eventually("the first build", func() bool { return h.builds() == 1 })

	h.clock.Advance(h.d.cfg.Settings.XDS.DebounceHoldOff)
	h.sendChange(8002, consul.Change{Services: []consul.ServiceKey{{Name: "web"}}, Endpoints: true})
	h.eventually("the flip's build", func() bool { return h.builds() == 2 })
	if w := h.world.Load(); !w.EndpointsOnly {
		t.Error("a flip of web did not reach the pipeline as endpoints-only")
	}

	if err := os.WriteFile(file, []byte(fmt.Sprintf(gatePolicy, "3s", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	h.d.Reload()
	h.eventually("the accepted reload", func() bool { return h.d.Policy().SuccessfulReloads >= 2 })
	h.clock.Advance(h.d.cfg.Settings.XDS.DebounceHoldOff)
	h.eventually("the reload's build", func() bool { return h.builds() == 3 })
	if w := h.world.Load(); w.EndpointsOnly {
		t.Error("the build after a policy reload claimed only endpoints changed")
	}
	h.clock.Advance(h.d.cfg.Settings.XDS.DebounceHoldOff)
	h.sendChange(8003, consul.Change{Services: []consul.ServiceKey{{Name: "web"}}, Endpoints: true})
	h.eventually("the next flip's build", func() bool { return h.builds() == 4 })
	if w := h.world.Load(); !w.EndpointsOnly {
		t.Error("a flip after the reload's build did not arrive as endpoints-only (the reload's change was not reset)")
	}
}

// TestReloadNotHeldByAFailingGroup: a group the running bridge already
// cannot translate (odd Consul data) keeps its last good state whatever
// the policy, so a reload is not refused for it: web's new timeout is
// accepted and served while edge still fails. (The gate refused every
// reload while any group failed, holding every policy change hostage to
// data the policy did not bring.) A reload that breaks a group that was
// translating is still refused (TestRejectedReloadLeavesServedMemory).
func TestReloadNotHeldByAFailingGroup(t *testing.T) {
	h, file := gateHarness(t)
	h.send(8001)
	h.eventually("the first build", func() bool { return h.builds() == 1 })
	g := "edge"
	h.failGroup.Store(&g)
	h.clock.Advance(h.d.cfg.Settings.XDS.DebounceHoldOff)
	h.send(8002)
	h.eventually("edge failing", func() bool { return len(h.d.Policy().FailedGroups) == 1 })

	if err := os.WriteFile(file, []byte(fmt.Sprintf(gatePolicy, "3s", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	h.d.Reload()
	h.eventually("the reload decided", func() bool {
		st := h.d.Policy()
		return st.SuccessfulReloads >= 2 || st.FailedReloads > 0
	})
	if st := h.d.Policy(); st.FailedReloads != 0 {
		t.Fatalf("a reload changing only web was refused for edge's existing failure: %v", st.LastError)
	}
	h.clock.Advance(h.d.cfg.Settings.XDS.DebounceHoldOff)
	h.eventually("web's new timeout served", func() bool {
		w := h.world.Load()
		for _, c := range w.Output.Shared.Clusters {
			if c.GetName() == "web" && c.GetConnectTimeout().AsDuration().String() == "3s" {
				return true
			}
		}
		return false
	})
	if fg := h.d.Policy().FailedGroups; len(fg) != 1 || fg[0].Group != "edge" {
		t.Errorf("failed groups %+v, want edge still failing", fg)
	}
}

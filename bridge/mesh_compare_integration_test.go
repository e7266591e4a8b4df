package bridge_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// meshView is what a sidecar Envoy must agree on whichever server it
// points at: the ports it listens on, the upstream clusters it dials
// (Consul's names, which are also the SNI) and the SPIFFE ids it checks.
type meshView struct {
	ports    []uint32
	binds    []string
	clusters []string
	sans     []string
	snis     []string
}

var (
	spiffeRE = regexp.MustCompile(`spiffe://[^"\\]+`)
	sniRE    = regexp.MustCompile(`"sni":"([^"]+)"`)
)

func viewOf(st adsclient.State) meshView {
	var v meshView
	for _, n := range st.ListenerNames() {
		sa := st.Listener(n).GetAddress().GetSocketAddress()
		v.ports = append(v.ports, sa.GetPortValue())
		v.binds = append(v.binds, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
	}
	for _, n := range st.ClusterNames() {
		if !strings.Contains(n, ".internal.") {
			continue // the local app's cluster, named by each server its own way
		}
		v.clusters = append(v.clusters, n)
		b, _ := protojson.Marshal(st.Cluster(n))
		v.sans = append(v.sans, spiffeRE.FindAllString(string(b), -1)...)
		for _, m := range sniRE.FindAllStringSubmatch(string(b), -1) {
			v.snis = append(v.snis, m[1])
		}
	}
	slices.Sort(v.ports)
	slices.Sort(v.binds)
	slices.Sort(v.sans)
	v.sans = slices.Compact(v.sans)
	return v
}

// TestMeshMatchesConsulXDS: for the same registrations, Consul's own xDS
// server (this Consul's gRPC port) and the bridge give web's sidecar the
// same listener addresses and ports, upstream cluster names and SNI, and
// SPIFFE SANs; and an intention reaches both (timed, logged).
func TestMeshMatchesConsulXDS(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterWebAPIMesh(t)
	h := startMeshBridge(t, agent, "mesh {}\n")
	dial := func(addr string) (*adsclient.Client, meshView) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := adsclient.Dial(ctx, adsclient.Config{Addr: addr, NodeID: "web-sidecar-proxy", Cluster: "web", Mode: adsclient.Delta,
			// The bridge leaves the mesh's secrets to the per-VM agent:
			// listeners need not wait for them here.
			InitialFetchTimeout: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		st, err := c.Wait(ctx, func(s adsclient.State) bool {
			v := viewOf(s)
			return len(v.ports) >= 2 && len(v.clusters) > 0 && len(v.sans) > 0
		})
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		return c, viewOf(st)
	}
	cc, consul := dial(agent.GRPCAddr())
	bc, ours := dial(h.daemon.XDSAddr().String())
	t.Logf("Consul: %+v", consul)
	t.Logf("bridge: %+v", ours)
	if !slices.Equal(consul.ports, ours.ports) || !slices.Equal(consul.binds, ours.binds) {
		t.Errorf("listener addresses: Consul %v, bridge %v", consul.binds, ours.binds)
	}
	if !slices.Equal(consul.clusters, ours.clusters) {
		t.Errorf("upstream clusters: Consul %v, bridge %v", consul.clusters, ours.clusters)
	}
	if !slices.Equal(consul.snis, ours.snis) || len(ours.snis) == 0 {
		t.Errorf("upstream SNI: Consul %v, bridge %v", consul.snis, ours.snis)
	}
	if !slices.Equal(consul.sans, ours.sans) {
		t.Errorf("SPIFFE SANs: Consul %v, bridge %v", consul.sans, ours.sans)
	}

	// The same intention, timed to each server's public listener.
	hasAPI := func(s adsclient.State) bool {
		for _, n := range s.ListenerNames() {
			if b, _ := protojson.Marshal(s.Listener(n)); strings.Contains(string(b), "/svc/api") {
				return true
			}
		}
		return false
	}
	if hasAPI(cc.Snapshot()) || hasAPI(bc.Snapshot()) {
		t.Fatal("a listener names api before any intention")
	}
	if _, _, err := agent.Client().ConfigEntries().Set(&api.ServiceIntentionsConfigEntry{Kind: api.ServiceIntentions, Name: "web",
		Sources: []*api.SourceIntention{{Name: "api", Action: api.IntentionActionDeny}}}, nil); err != nil {
		t.Fatal(err)
	}
	wrote := time.Now()
	var wg sync.WaitGroup
	for _, x := range []struct {
		name string
		c    *adsclient.Client
	}{{"Consul", cc}, {"bridge", bc}} {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := x.c.Wait(ctx, hasAPI); err != nil {
				t.Errorf("%s: intention not in a listener: %v", x.name, err)
				return
			}
			t.Logf("%s: intention write to listener update in %s", x.name, time.Since(wrote))
		})
	}
	wg.Wait()
}

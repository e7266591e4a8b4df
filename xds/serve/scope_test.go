package serve

import (
	"context"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/irtest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
)

// twoGroups is group a routing to the clusters in aRoutes, group b to
// "b" (whose upstream TLS has secrets), and cluster "c" that nobody
// routes to; nodes in no group get nothing.
func twoGroups(t *testing.T, aRoutes ...string) *xds.Output {
	t.Helper()
	out, err := xds.Translate(twoGroupsModel(aRoutes...))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func twoGroupsModel(aRoutes ...string) *ir.Model {
	m := &ir.Model{}
	for _, n := range []string{"a", "b", "c"} {
		m.Clusters = append(m.Clusters, irtest.Cluster(n, irtest.Endpoint("10.0.0.1", 0, "dc1")))
	}
	m.Clusters[1].TLS = &ir.UpstreamTLS{SNI: "b", CertificateSecret: "b/cert"}
	m.Secrets = []ir.Secret{irtest.CertSecret("b/cert", "1")}
	var routes []ir.Route
	for _, c := range aRoutes {
		r := irtest.RouteTo("/"+c+"/", ir.WeightedCluster{Name: c, Weight: 1})
		r.Name = "all/" + c
		routes = append(routes, r)
	}
	b := irtest.RouteTo("/", ir.WeightedCluster{Name: "b", Weight: 1})
	b.Name = "all/0"
	m.Groups = []ir.Group{
		{Name: "a", Listeners: []ir.Listener{irtest.HTTPListener("a.http", routes...)}},
		{Name: "b", Listeners: []ir.Listener{irtest.HTTPListener("b.http", b)}},
	}
	irtest.Reach(m)
	m.UnmatchedAll = false
	return m
}

func resolveAB(nodeCluster string) string {
	if nodeCluster == "a" || nodeCluster == "b" {
		return nodeCluster
	}
	return ""
}

// TestGroupsGetOnlyWhatTheyReach: each group's proxies hold its clusters,
// their endpoints and their secrets, nothing of the other group's; a node
// in no group gets nothing and shows NO_GROUP; a change that widens one
// group's set sends CDS to that group only.
func TestGroupsGetOnlyWhatTheyReach(t *testing.T) {
	for _, mode := range []adsclient.Mode{adsclient.SotW, adsclient.Delta} {
		t.Run(mode.String(), func(t *testing.T) {
			s := startServer(t, ServerConfig{})
			if _, err := s.Update(context.Background(), twoGroups(t, "a"), resolveAB); err != nil {
				t.Fatal(err)
			}
			a := dial(t, s, adsclient.Config{NodeID: "a-1", Cluster: "a", Mode: mode})
			b := dial(t, s, adsclient.Config{NodeID: "b-1", Cluster: "b", Mode: mode})
			none := dial(t, s, adsclient.Config{NodeID: "stray-1", Cluster: "stray", Mode: mode})
			wait := func(c *adsclient.Client, what string, cond func(adsclient.State) bool) adsclient.State {
				t.Helper()
				st, err := c.Wait(waitCtx(t), cond)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				return st
			}
			sa := wait(a, "group a", func(st adsclient.State) bool { return st.RouteConfig("a.http") != nil })
			sb := wait(b, "group b", func(st adsclient.State) bool {
				return st.RouteConfig("b.http") != nil && len(st.SecretNames()) == 1
			})
			for _, tc := range []struct {
				who                         string
				st                          adsclient.State
				clusters, endpoints, secret []string
			}{
				{"a", sa, []string{"a"}, []string{"a"}, nil},
				{"b", sb, []string{"b"}, []string{"b"}, []string{"b/cert"}},
			} {
				if got := tc.st.ClusterNames(); !slices.Equal(got, tc.clusters) {
					t.Errorf("group %s clusters = %v, want %v", tc.who, got, tc.clusters)
				}
				if got := tc.st.LoadAssignmentNames(); !slices.Equal(got, tc.endpoints) {
					t.Errorf("group %s endpoints = %v, want %v", tc.who, got, tc.endpoints)
				}
				if got := tc.st.SecretNames(); !slices.Equal(got, tc.secret) {
					t.Errorf("group %s secrets = %v, want %v", tc.who, got, tc.secret)
				}
			}
			s.waitStatus(t, "stray-1", "CDS", StatusSynced)
			if st := none.Snapshot(); len(st.ClusterNames())+len(st.ListenerNames())+len(st.SecretNames()) > 0 {
				t.Errorf("a node in no group got %v", st)
			}
			if p := s.proxy("stray-1"); p == nil || p.Status != StatusNoGroup {
				t.Errorf("stray-1 status = %+v, want %s", p, StatusNoGroup)
			}
			if n := testutil.ToFloat64(s.scope.unmatched); n != 1 {
				t.Errorf("unmatched nodes counted %v, want 1", n)
			}

			bCDS := b.Stats().Responses[adsclient.ClusterType]
			if _, err := s.Update(context.Background(), twoGroups(t, "a", "c"), resolveAB); err != nil {
				t.Fatal(err)
			}
			wait(a, "group a gets c", func(st adsclient.State) bool {
				return slices.Equal(st.ClusterNames(), []string{"a", "c"}) && slices.Equal(st.LoadAssignmentNames(), []string{"a", "c"})
			})
			time.Sleep(200 * time.Millisecond)
			if n := b.Stats().Responses[adsclient.ClusterType]; n != bCDS {
				t.Errorf("group b got %d CDS responses for a change to group a", n-bCDS)
			}
			if got := b.Snapshot().ClusterNames(); !slices.Equal(got, []string{"b"}) {
				t.Errorf("group b clusters = %v after a's change", got)
			}
		})
	}
}

// TestRefusedByName: under authorize_nodes, a node asking by name for
// another group's secret, cluster endpoints or listener is answered
// nothing for it, and the refusal is counted once per node and name.
func TestRefusedByName(t *testing.T) {
	s := NewServer(ServerConfig{Logger: zerolog.New(zerolog.NewTestWriter(t)), AuthorizeNodes: true})
	if _, err := s.Update(context.Background(), twoGroups(t, "a"), resolveAB); err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "a-1", Cluster: "a"}
	s.sawNode(cache.Key(node))
	for _, tc := range []struct{ typ, name string }{
		{resourcev3.SecretType, "b/cert"},
		{resourcev3.EndpointType, "b"},
		{resourcev3.ListenerType, "b.http"},
		{resourcev3.SecretType, "b/cert"}, // again: counted once
	} {
		ch := make(chan cachev3.Response, 1)
		sub := stream.NewSotwSubscription([]string{tc.name}, false)
		cancel, err := s.cache.CreateWatch(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: tc.typ, ResourceNames: []string{tc.name}}, sub, ch)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-ch:
			d, _ := r.GetDiscoveryResponse()
			if len(d.GetResources()) > 0 {
				t.Errorf("%s %q: served %d resources to a node outside its group", tc.typ, tc.name, len(d.GetResources()))
			}
		default:
		}
		cancel()
	}
	for typ, want := range map[string]float64{"SDS": 1, "EDS": 1, "LDS": 1, "CDS": 0} {
		if n := testutil.ToFloat64(s.scope.refused.WithLabelValues(typ)); n != want {
			t.Errorf("%s refusals = %v, want %v", typ, n, want)
		}
	}
	// Its own cluster's endpoints are no refusal.
	sub := stream.NewSotwSubscription([]string{"a"}, false)
	ch := make(chan cachev3.Response, 1)
	if _, err := s.cache.CreateWatch(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"a"}}, sub, ch); err != nil {
		t.Fatal(err)
	}
	if r := <-ch; r == nil {
		t.Fatal("no endpoints for its own cluster")
	}
	if n := testutil.ToFloat64(s.scope.refused.WithLabelValues("EDS")); n != 1 {
		t.Errorf("EDS refusals = %v after asking for its own, want 1", n)
	}
}

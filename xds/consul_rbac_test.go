package xds_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetworkv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/hashicorp/consul/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/intention"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// TestRBACDecidesLikeConsul writes service-intentions to a real Consul,
// fetches the RBAC Consul's own xDS server gives the destinations'
// sidecars, and checks that the bridge's RBAC (from the same entries, read
// back through Consul's API and resolved by package intention) lets in
// exactly the same callers and requests, but in the one case where
// Consul's RBAC and its documented precedence part ways (a wildcard
// source of the destination's entry above an exact source of the
// wildcard entry), pinned here: the bridge follows the documentation.
func TestRBACDecidesLikeConsul(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Consul agent")
	}
	a := consultest.Start(t)
	c := a.Client()
	set := func(e api.ConfigEntry) {
		t.Helper()
		if _, _, err := c.ConfigEntries().Set(e, nil); err != nil {
			t.Fatalf("write %s %q: %v", e.GetKind(), e.GetName(), err)
		}
	}
	set(&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "api", Protocol: "http"})
	allow, deny := api.IntentionActionAllow, api.IntentionActionDeny
	entries := []*api.ServiceIntentionsConfigEntry{
		{Kind: api.ServiceIntentions, Name: "api", Sources: []*api.SourceIntention{
			{Name: "ops", Action: deny},
			{Name: "web", Permissions: []*api.IntentionPermission{
				{Action: allow, HTTP: &api.IntentionHTTPPermission{PathPrefix: "/admin/health"}},
				{Action: deny, HTTP: &api.IntentionHTTPPermission{PathPrefix: "/admin"}},
				{Action: deny, HTTP: &api.IntentionHTTPPermission{PathRegex: "/v1/items/[0-9]+", Methods: []string{"DELETE", "POST"}}},
				{Action: deny, HTTP: &api.IntentionHTTPPermission{Header: []api.IntentionHTTPHeaderPermission{{Name: "x-team", Exact: "RED"}}}},
			}},
		}},
		{Kind: api.ServiceIntentions, Name: "db", Sources: []*api.SourceIntention{
			{Name: "web", Action: deny},
			{Name: "*", Action: deny},
			{Name: "api", Action: allow},
		}},
		// Where Consul's RBAC and its documented precedence part ways:
		// "* -> cache" (8) outranks "batch -> *" (6), so batch may call
		// cache; Consul 1.15's RBAC still denies it.
		{Kind: api.ServiceIntentions, Name: "cache", Sources: []*api.SourceIntention{
			{Name: "*", Action: allow},
			{Name: "other", Action: deny},
		}},
		{Kind: api.ServiceIntentions, Name: "*", Sources: []*api.SourceIntention{
			{Name: "batch", Action: deny},
			{Name: "ops", Action: allow},
		}},
	}
	for _, e := range entries {
		set(e)
	}
	for i, svc := range []string{"api", "db", "cache"} {
		reg := &api.AgentServiceRegistration{Name: svc, Port: 8080 + i, Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{}}}
		if err := c.Agent().ServiceRegister(reg); err != nil {
			t.Fatal(err)
		}
	}
	// The same entries as the bridge reads them.
	var ours []intention.Entry
	for _, name := range []string{"api", "db", "cache", "*"} {
		e, _, err := c.ConfigEntries().Get(api.ServiceIntentions, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		ours = append(ours, intention.FromConfigEntry(e.(*api.ServiceIntentionsConfigEntry)))
	}
	grpcAddr := consulGRPCAddr(t, c)
	roots, _, err := c.Connect().CARoots(nil)
	if err != nil || roots.TrustDomain == "" {
		t.Fatalf("CA roots: %v", err)
	}
	for _, tc := range []struct {
		service string
		http    bool
		// differ: the callers Consul's RBAC decides against its own
		// documented precedence (the bridge follows the documentation).
		differ string
		// ready: Consul's RBAC once it has every entry (its proxy state
		// may first have some): it denies this caller and request.
		ready intention.Request
	}{
		{"api", true, "", intention.Request{Source: "web", Method: "GET", Path: "/admin"}},
		{"db", false, "", intention.Request{Source: "other"}},
		{"cache", false, "batch", intention.Request{Source: "other"}},
	} {
		t.Run(tc.service, func(t *testing.T) {
			theirs := consulPublicRBAC(t, grpcAddr, tc.service+"-sidecar-proxy", tc.http, func(r *rbacv3.RBAC) bool {
				return !rbacAllows(t, r, ir.SPIFFEID(roots.TrustDomain, "dc1", tc.ready.Source), tc.ready)
			})
			// Consul without ACLs allows what no intention decides.
			in, err := intention.Resolve(ours, tc.service, ir.IntentionAllow)
			if err != nil {
				t.Fatal(err)
			}
			var mine *rbacv3.RBAC
			if tc.http {
				cfg, err := xds.HTTPRBAC(in)
				if err != nil {
					t.Fatal(err)
				}
				mine = cfg.GetRules()
			} else {
				cfg, err := xds.NetworkRBAC(in)
				if err != nil {
					t.Fatal(err)
				}
				mine = cfg.GetRules()
			}
			decided := 0
			for _, src := range []string{"web", "ops", "batch", "api", "other"} {
				// Consul 1.15 matches its own trust domain in principals, the
				// bridge any (the listener trusts only the Connect roots):
				// callers here carry Consul's.
				spiffe := ir.SPIFFEID(roots.TrustDomain, "dc1", src)
				for _, path := range []string{"/", "/admin", "/admin/health", "/v1/items/7", "/v1/items/x"} {
					for _, method := range []string{"GET", "POST", "DELETE"} {
						for _, hdr := range []map[string]string{nil, {"x-team": "RED"}, {"x-team": "red"}} {
							req := intention.Request{Source: src, Method: method, Path: path, Headers: hdr}
							want := rbacAllows(t, theirs, spiffe, req)
							if src == tc.differ {
								want = !want
							}
							if got := rbacAllows(t, mine, spiffe, req); got != want {
								t.Errorf("%s %s %s %v: bridge allows=%v, Consul allows=%v (differ: %q)", src, method, path, hdr, got, want, tc.differ)
							}
							if ref := intention.Decide(in, req) == ir.IntentionAllow; ref != want {
								t.Errorf("%s %s %s %v: intention.Decide allows=%v, Consul allows=%v (differ: %q)", src, method, path, hdr, ref, want, tc.differ)
							}
							decided++
						}
					}
				}
			}
			t.Logf("%d decisions compared with Consul's own RBAC", decided)
		})
	}
}

// consulGRPCAddr is the agent's plaintext gRPC address (its xDS server).
func consulGRPCAddr(t *testing.T, c *api.Client) string {
	t.Helper()
	self, err := c.Agent().Self()
	if err != nil {
		t.Fatal(err)
	}
	port, ok := self["DebugConfig"]["GRPCPort"].(float64)
	if !ok || port <= 0 {
		t.Fatalf("no gRPC port in the agent's config: %v", self["DebugConfig"]["GRPCPort"])
	}
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(int(port)))
}

// consulPublicRBAC subscribes to Consul's xDS as the sidecar proxyID
// and returns the first RBAC of its public listener that is ready.
func consulPublicRBAC(t *testing.T, addr, proxyID string, http bool, ready func(*rbacv3.RBAC) bool) *rbacv3.RBAC {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: proxyID, Cluster: strings.TrimSuffix(proxyID, "-sidecar-proxy"),
		UserAgentName: "envoy", UserAgentVersionType: &corev3.Node_UserAgentBuildVersion{UserAgentBuildVersion: &corev3.BuildVersion{
			Version: &typev3.SemanticVersion{MajorNumber: 1, MinorNumber: 25},
		}}}
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.ListenerType} {
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: typ}); err != nil {
			t.Fatal(err)
		}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("waiting for %s's public listener from Consul: %v", proxyID, err)
		}
		if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		if resp.GetTypeUrl() != resourcev3.ListenerType {
			continue
		}
		for _, r := range resp.GetResources() {
			if !strings.HasPrefix(r.GetName(), "public_listener:") {
				continue
			}
			l := &listenerv3.Listener{}
			if err := r.GetResource().UnmarshalTo(l); err != nil {
				t.Fatal(err)
			}
			// The first listener may come before Consul's proxy state
			// has every intention: wait for one that is ready.
			if r := publicRBAC(t, l, http); ready(r) {
				return r
			}
		}
	}
}

func publicRBAC(t *testing.T, l *listenerv3.Listener, http bool) *rbacv3.RBAC {
	t.Helper()
	for _, f := range l.GetFilterChains()[0].GetFilters() {
		switch {
		case !http && f.GetName() == "envoy.filters.network.rbac":
			cfg := &rbacnetworkv3.RBAC{}
			if err := f.GetTypedConfig().UnmarshalTo(cfg); err != nil {
				t.Fatal(err)
			}
			return cfg.GetRules()
		case http && f.GetName() == "envoy.filters.network.http_connection_manager":
			hcm := &hcmv3.HttpConnectionManager{}
			if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
				t.Fatal(err)
			}
			for _, hf := range hcm.GetHttpFilters() {
				if hf.GetName() == "envoy.filters.http.rbac" {
					cfg := &rbachttpv3.RBAC{}
					if err := hf.GetTypedConfig().UnmarshalTo(cfg); err != nil {
						t.Fatal(err)
					}
					return cfg.GetRules()
				}
			}
		}
	}
	t.Fatalf("no RBAC in Consul's listener %s", l.GetName())
	return nil
}

package serve

import (
	"context"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/envoynode"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestSidecarWithNodeOnEveryRequest: a Connect sidecar and a plain proxy
// sending their node with every request, as Envoy does by default, keep
// being served their groups through updates while /v1/proxies is read
// concurrently: keying a sidecar must not write to the node its requests
// share (under -race, a write would show here), and the memo's node must
// keep what the proxy announced, so its next request is not taken for a
// change of identity.
func TestSidecarWithNodeOnEveryRequest(t *testing.T) {
	s := startServer(t, ServerConfig{Sidecars: true})
	if _, err := s.Update(context.Background(), sidecarOutput(t), resolveSidecars); err != nil {
		t.Fatal(err)
	}
	s.SetSidecars(map[string][]SidecarInfo{"web-sidecar-proxy": {webInfo}})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				_ = s.Proxies()
			}
		}
	}()
	for _, mode := range []adsclient.Mode{adsclient.SotW, adsclient.Delta} {
		for id, port := range map[string]uint32{"web-sidecar-proxy": 21000, "edge-1": 8080} {
			key, group := "edge", "edge"
			if id == "web-sidecar-proxy" {
				key, group = webSidecar, webSidecar
			}
			c := dial(t, s, adsclient.Config{NodeID: id, Cluster: "edge", Mode: mode, Extensions: envoynode.Extensions()[:40]})
			if _, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return slices.Contains(listenerPorts(st), port) }); err != nil {
				t.Fatalf("%s (%v): %v", id, mode, err)
			}
			// Endpoint updates: each is answered and ACKed with the node.
			for i := range 3 {
				out := sidecarOutput(t)
				out.Shared = testOutput(t, []string{"api"}, uint32(9000+i)).Shared
				if _, err := s.Update(context.Background(), shareAll(out), resolveSidecars); err != nil {
					t.Fatal(err)
				}
				want := s.current(key, resourcev3.EndpointType)
				if _, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return st.Version(resourcev3.EndpointType) == want }); err != nil {
					t.Fatalf("%s (%v), update %d: %v", id, mode, i, err)
				}
			}
			if p := s.waitStatus(t, id, "EDS", "SYNCED"); p.Group != group {
				t.Errorf("%s (%v): /v1/proxies shows group %q, want %q", id, mode, p.Group, group)
			}
			_ = c.Close()
		}
	}
}

// TestAuthorizedSidecarNodeBytesMayChange: with authorize_nodes and
// sidecars, a later request whose node has the same identity but other
// bytes (a metadata key more) is served, not refused as a new identity,
// and so is the one after it with the same bytes (the memo's node, which
// keying the sidecar must not have changed).
func TestAuthorizedSidecarNodeBytesMayChange(t *testing.T) {
	s, ca := startAuthorizedSidecars(t)
	cert, key := ca.issue(t, 31, nil, "spiffe://td.consul/ns/default/dc/dc1/svc/web")
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(t, ca, cert, key))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := &corev3.Node{Id: "web-sidecar-proxy", Cluster: "edge"}
	more, _ := structpb.NewStruct(map[string]any{"extra": "x"})
	later := &corev3.Node{Id: "web-sidecar-proxy", Cluster: "edge", Metadata: more}
	for i, req := range []*discoveryv3.DiscoveryRequest{
		{Node: first, TypeUrl: resourcev3.ListenerType},
		{Node: later, TypeUrl: resourcev3.ClusterType},
		// The same bytes again: the node the memo kept.
		{Node: later, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"api"}},
	} {
		if err := ads.Send(req); err != nil {
			t.Fatal(err)
		}
		r, err := ads.Recv()
		if err != nil {
			t.Fatalf("request %d (%s): stream ended: %v", i, req.TypeUrl, err)
		}
		if r.GetTypeUrl() != req.TypeUrl {
			t.Fatalf("request %d: answered %s, want %s", i, r.GetTypeUrl(), req.TypeUrl)
		}
	}
}

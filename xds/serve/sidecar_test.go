package serve

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

const webSidecar = ir.SidecarGroupPrefix + "vm-a/web-sidecar-proxy"

// sidecarOutput: group "edge" (listener on 8080) and web's sidecar group
// (its public listener on 21000).
func sidecarOutput(t *testing.T) *xds.Output {
	out := testOutput(t, []string{"api"}, 8080)
	sc := testOutput(t, []string{"api"}, 21000).Groups["edge"]
	sc.Listeners[0].Name = webSidecar + ".public"
	out.Groups[webSidecar] = sc
	return shareAll(out)
}

func resolveSidecars(nc string) string {
	if strings.HasPrefix(nc, ir.SidecarGroupPrefix) {
		return nc
	}
	return resolveEdge(nc)
}

func listenerPorts(st adsclient.State) []uint32 {
	var out []uint32
	for _, m := range st.Types[resourcev3.ListenerType].Resources {
		out = append(out, m.(*listenerv3.Listener).GetAddress().GetSocketAddress().GetPortValue())
	}
	return out
}

var webInfo = SidecarInfo{Node: "vm-a", Service: "web", Upstreams: []string{"api@127.0.0.1:9191"}}

// TestSidecarKeyedByNodeID: a node whose id is a registered proxy id gets
// its sidecar group whatever node.cluster it announces; /v1/proxies shows
// its destination and upstreams.
func TestSidecarKeyedByNodeID(t *testing.T) {
	s := startServer(t, ServerConfig{Sidecars: true})
	if _, err := s.Update(context.Background(), sidecarOutput(t), resolveSidecars); err != nil {
		t.Fatal(err)
	}
	s.SetSidecars(map[string][]SidecarInfo{"web-sidecar-proxy": {webInfo}})
	c := dial(t, s, adsclient.Config{NodeID: "web-sidecar-proxy", Cluster: "edge", InitialFetchTimeout: -1})
	st, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return len(listenerPorts(st)) > 0 })
	if err != nil {
		t.Fatal(err)
	}
	if got := listenerPorts(st); len(got) != 1 || got[0] != 21000 {
		t.Fatalf("listener ports = %v, want the sidecar's [21000]", got)
	}
	p := s.proxy("web-sidecar-proxy")
	if p == nil || p.Group != webSidecar || p.Sidecar == nil || p.Sidecar.Service != "web" || len(p.Sidecar.Upstreams) != 1 {
		t.Fatalf("/v1/proxies entry = %+v", p)
	}
	// A new upstream keeps the proxy's key (the stream stays) and shows.
	more := webInfo
	more.Upstreams = append(slices.Clone(webInfo.Upstreams), "db@127.0.0.1:9292")
	s.SetSidecars(map[string][]SidecarInfo{"web-sidecar-proxy": {more}})
	if p := s.proxy("web-sidecar-proxy"); p == nil || p.Sidecar == nil || len(p.Sidecar.Upstreams) != 2 {
		t.Fatalf("/v1/proxies entry after a new upstream = %+v", p)
	}
	select {
	case <-c.Done():
		t.Fatalf("the stream was closed by a change that keeps its key: %v", c.Err())
	case <-time.After(200 * time.Millisecond):
	}
	// Sidecars are counted together, not one series per proxy.
	if n := testutil.ToFloat64(s.metrics.connected.WithLabelValues(SidecarsMetricGroup, "ADS")); n != 1 {
		t.Errorf("connected_proxies{group=%q} = %v, want 1", SidecarsMetricGroup, n)
	}
	if n := testutil.CollectAndCount(s.metrics.connected); n != 1 {
		t.Errorf("connected_proxies has %d series, want the one of sidecars", n)
	}
}

// TestSidecarRekeyedOnRegistration: a stream that opened before its
// registration appeared is closed with Unavailable once it does, and
// its reconnection gets the sidecar group; likewise when the
// registration vanishes.
func TestSidecarRekeyedOnRegistration(t *testing.T) {
	s := startServer(t, ServerConfig{Sidecars: true})
	if _, err := s.Update(context.Background(), sidecarOutput(t), resolveSidecars); err != nil {
		t.Fatal(err)
	}
	s.SetSidecars(nil) // as the daemon does after every Update
	cfg := adsclient.Config{NodeID: "web-sidecar-proxy", Cluster: "edge", InitialFetchTimeout: -1}
	c := dial(t, s, cfg)
	st, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return len(listenerPorts(st)) > 0 })
	if err != nil {
		t.Fatal(err)
	}
	if got := listenerPorts(st); len(got) != 1 || got[0] != 8080 {
		t.Fatalf("before registration: ports %v, want edge's [8080]", got)
	}
	s.SetSidecars(map[string][]SidecarInfo{"web-sidecar-proxy": {webInfo}})
	waitClosed(t, c)
	c = dial(t, s, cfg)
	st, err = c.Wait(waitCtx(t), func(st adsclient.State) bool { return len(listenerPorts(st)) > 0 })
	if err != nil {
		t.Fatal(err)
	}
	if got := listenerPorts(st); len(got) != 1 || got[0] != 21000 {
		t.Fatalf("after registration: ports %v, want the sidecar's [21000]", got)
	}
	// An unrelated change keeps the stream.
	s.SetSidecars(map[string][]SidecarInfo{"web-sidecar-proxy": {webInfo}, "api-sidecar-proxy": {{Node: "vm-a"}}})
	select {
	case <-c.Done():
		t.Fatalf("stream closed by an unrelated registration: %v", c.Err())
	case <-time.After(100 * time.Millisecond):
	}
	s.SetSidecars(nil)
	waitClosed(t, c)
}

func waitClosed(t *testing.T, c *adsclient.Client) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("stream not closed after its registration changed")
	}
	if code := status.Code(c.Err()); code != codes.Unavailable {
		t.Fatalf("stream ended with %v, want Unavailable", c.Err())
	}
}

// TestSidecarAmbiguous: a proxy id on two Consul nodes is served as
// neither unless the node says which (metadata consul_node); a client
// may not claim a sidecar group by node.cluster.
func TestSidecarAmbiguous(t *testing.T) {
	s := startServer(t, ServerConfig{Sidecars: true})
	if _, err := s.Update(context.Background(), sidecarOutput(t), resolveSidecars); err != nil {
		t.Fatal(err)
	}
	vmb := SidecarInfo{Node: "vm-b", Service: "web"}
	s.SetSidecars(map[string][]SidecarInfo{"web-sidecar-proxy": {webInfo, vmb}})
	c := dial(t, s, adsclient.Config{NodeID: "web-sidecar-proxy", Cluster: "web", InitialFetchTimeout: -1})
	eventually(t, "ambiguity on /v1/proxies", func() bool {
		p := s.proxy("web-sidecar-proxy")
		return p != nil && p.Sidecar != nil && strings.Contains(p.Sidecar.Error, "vm-a, vm-b")
	}, func() string { return "" })
	if st := c.Snapshot(); len(listenerPorts(st)) > 0 {
		t.Fatalf("ambiguous sidecar got listeners %v", listenerPorts(st))
	}
	c2 := dial(t, s, adsclient.Config{NodeID: "x", Cluster: webSidecar, InitialFetchTimeout: -1})
	select {
	case <-c2.Done():
		if status.Code(c2.Err()) != codes.PermissionDenied {
			t.Fatalf("claiming a sidecar group: %v, want PermissionDenied", c2.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a client claiming a sidecar group by node.cluster was not refused")
	}
}

// TestSidecarConsulNode: node metadata consul_node picks among the
// registrations of one proxy id.
func TestSidecarConsulNode(t *testing.T) {
	sc := newSidecars(zerolog.New(zerolog.NewTestWriter(t)), false)
	vmb := SidecarInfo{Node: "vm-b"}
	sc.set(map[string][]SidecarInfo{"web-sidecar-proxy": {vmb, webInfo}})
	for consulNode, want := range map[string]string{"vm-a": webSidecar, "vm-b": vmb.Group("web-sidecar-proxy"), "vm-c": "web", "": ir.SidecarGroupPrefix + "?ambiguous/web-sidecar-proxy"} {
		if got, _, _ := sc.keyLocked("web-sidecar-proxy", consulNode, "web"); got != want {
			t.Errorf("consul_node %q: key %q, want %q", consulNode, got, want)
		}
	}
}

// TestSidecarREST: a REST poll is keyed like a stream, every poll afresh.
func TestSidecarREST(t *testing.T) {
	s := startServer(t, ServerConfig{Sidecars: true})
	if _, err := s.Update(context.Background(), sidecarOutput(t), resolveSidecars); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	node := &corev3.Node{Id: "web-sidecar-proxy", Cluster: "edge"}
	port := func() uint32 {
		t.Helper()
		r, err := adsclient.FetchREST(waitCtx(t), hc, "http://"+s.addr, adsclient.ListenerType, node, "")
		if err != nil || r.Status != http.StatusOK || len(r.Resources) != 1 {
			t.Fatalf("REST LDS = %+v %v", r, err)
		}
		for _, m := range r.Resources {
			return m.(*listenerv3.Listener).GetAddress().GetSocketAddress().GetPortValue()
		}
		return 0
	}
	if got := port(); got != 8080 {
		t.Fatalf("before registration: port %d, want edge's 8080", got)
	}
	s.SetSidecars(map[string][]SidecarInfo{"web-sidecar-proxy": {webInfo}})
	if got := port(); got != 21000 {
		t.Fatalf("after registration: port %d, want the sidecar's 21000", got)
	}
	r, err := adsclient.FetchREST(waitCtx(t), hc, "http://"+s.addr, adsclient.ListenerType, &corev3.Node{Id: "x", Cluster: webSidecar}, "")
	if err != nil || r.Status != http.StatusForbidden {
		t.Fatalf("REST claiming a sidecar group = %+v %v, want 403", r, err)
	}
}

// TestSidecarWaitsForIndex: with sidecars on, a stream is keyed only once
// the first index has come, so a sidecar connecting at start goes
// straight to its group (no close and reconnect).
func TestSidecarWaitsForIndex(t *testing.T) {
	s := startServer(t, ServerConfig{Sidecars: true})
	if _, err := s.Update(context.Background(), sidecarOutput(t), resolveSidecars); err != nil {
		t.Fatal(err)
	}
	c := dial(t, s, adsclient.Config{NodeID: "web-sidecar-proxy", Cluster: "edge", InitialFetchTimeout: -1})
	time.Sleep(100 * time.Millisecond)
	if st := c.Snapshot(); len(st.Types) > 0 {
		t.Fatalf("served before the first sidecar index: %v", st)
	}
	s.SetSidecars(map[string][]SidecarInfo{"web-sidecar-proxy": {webInfo}})
	st, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return len(listenerPorts(st)) > 0 })
	if err != nil {
		t.Fatal(err)
	}
	if got := listenerPorts(st); len(got) != 1 || got[0] != 21000 {
		t.Fatalf("ports %v, want the sidecar's [21000]", got)
	}
}

// TestSidecarBootstrapConsulNode: `bootstrap -consul-node` writes the
// metadata that picks the registration, as the server reads it.
func TestSidecarBootstrapConsulNode(t *testing.T) {
	sc := newSidecars(zerolog.New(zerolog.NewTestWriter(t)), true)
	vmb := SidecarInfo{Node: "vm-b"}
	sc.set(map[string][]SidecarInfo{"web-sidecar-proxy": {vmb, webInfo}})
	for consulNode, want := range map[string]string{"vm-a": webSidecar, "vm-b": vmb.Group("web-sidecar-proxy")} {
		b, err := xds.Bootstrap(xds.BootstrapConfig{NodeID: "web-sidecar-proxy", Cluster: "web", XDS: []string{"127.0.0.1:18000"}, ConsulNode: consulNode})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.ValidateAll(); err != nil {
			t.Fatal(err)
		}
		if got, _, err := sc.restKey(b.GetNode()); err != nil || got != want {
			t.Errorf("bootstrap -consul-node %s: key %q (%v), want %q", consulNode, got, err, want)
		}
	}
}

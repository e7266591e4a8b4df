package serve

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// cacheClient drives cache.Cache the way go-control-plane's servers do:
// one subscription per type, ReturnedResources set from each response,
// the next watch opened with the response's nonce (an ACK).
type cacheClient struct {
	t     *testing.T
	c     *cache.Cache
	node  *corev3.Node
	typ   string
	delta bool
	sub   stream.Subscription
	ch    chan cachev3.Response
	dch   chan cachev3.DeltaResponse
	nonce int
	ver   string
}

func newSotwClient(t *testing.T, c *cache.Cache, cluster, typ string, names []string) *cacheClient {
	cl := &cacheClient{t: t, c: c, node: &corev3.Node{Id: "n", Cluster: cluster}, typ: typ,
		sub: stream.NewSotwSubscription(names, true), ch: make(chan cachev3.Response, 1)}
	cl.watch(names)
	return cl
}

func newDeltaClient(t *testing.T, c *cache.Cache, cluster, typ string, names []string) *cacheClient {
	cl := &cacheClient{t: t, c: c, node: &corev3.Node{Id: "n", Cluster: cluster}, typ: typ, delta: true,
		sub: stream.NewDeltaSubscription(names, nil, nil, true), dch: make(chan cachev3.DeltaResponse, 1)}
	cl.watch(nil)
	return cl
}

func (cl *cacheClient) nonceStr() string {
	if cl.nonce == 0 {
		return ""
	}
	return string(rune('0' + cl.nonce))
}

// watch sends the next request: SotW with the full name list (nil keeps
// the subscription), delta with nothing new.
func (cl *cacheClient) watch(names []string) {
	cl.t.Helper()
	var err error
	if cl.delta {
		_, err = cl.c.CreateDeltaWatch(&discoveryv3.DeltaDiscoveryRequest{Node: cl.node, TypeUrl: cl.typ, ResponseNonce: cl.nonceStr()}, cl.sub, cl.dch)
	} else {
		if names != nil {
			cl.sub.SetResourceSubscription(names)
		}
		_, err = cl.c.CreateWatch(&discoveryv3.DiscoveryRequest{Node: cl.node, TypeUrl: cl.typ, ResponseNonce: cl.nonceStr(), VersionInfo: cl.ver,
			ResourceNames: slices.Sorted(maps.Keys(cl.sub.SubscribedResources()))}, cl.sub, cl.ch)
	}
	if err != nil {
		cl.t.Fatal(err)
	}
}

// got is one response: the names it carried (and removed, for delta).
type got struct {
	names, removed []string
	any            []*cache.Entry
	// wire is what the server puts on the wire: the response's Anys.
	wire    []*anypb.Any
	version string
}

// take returns the pending response (ok=false if none) and ACKs it with
// the next watch.
func (cl *cacheClient) take() (got, bool) {
	cl.t.Helper()
	g, ok := cl.receive()
	if ok {
		cl.ack()
	}
	return g, ok
}

// ack opens the next watch with the last response's nonce.
func (cl *cacheClient) ack() {
	cl.t.Helper()
	cl.nonce++
	cl.watch(nil)
}

// receive returns the pending response (ok=false if none) and holds it,
// as a server does once it sent it, without acknowledging it yet.
func (cl *cacheClient) receive() (got, bool) {
	cl.t.Helper()
	var g got
	if cl.delta {
		select {
		case r := <-cl.dch:
			d, _ := r.GetDeltaDiscoveryResponse()
			for _, res := range d.GetResources() {
				g.names = append(g.names, res.GetName())
				g.wire = append(g.wire, res.GetResource())
			}
			g.removed, g.version = d.GetRemovedResources(), d.GetSystemVersionInfo()
			g.any = r.(*cache.DeltaResponse).Entries()
			cl.sub.SetReturnedResources(r.GetReturnedResources())
		default:
			return g, false
		}
	} else {
		select {
		case r := <-cl.ch:
			d, _ := r.GetDiscoveryResponse()
			for _, a := range r.(*cache.SotwResponse).Entries() {
				g.names = append(g.names, a.Name())
			}
			g.version, g.any, g.wire = d.GetVersionInfo(), r.(*cache.SotwResponse).Entries(), d.GetResources()
			cl.sub.SetReturnedResources(r.GetReturnedResources())
			cl.ver = g.version
		default:
			return g, false
		}
	}
	return g, true
}

func (cl *cacheClient) mustTake(what string) got {
	cl.t.Helper()
	g, ok := cl.take()
	if !ok {
		cl.t.Fatalf("%s: no response", what)
	}
	return g
}

func (cl *cacheClient) mustNotTake(what string) {
	cl.t.Helper()
	if g, ok := cl.take(); ok {
		cl.t.Fatalf("%s: unexpected response %+v", what, g.names)
	}
}

// withEndpointPort returns out with cluster i's endpoint on a new port,
// all other resources the same objects.
func withEndpointPort(out *xds.Output, i int, port uint32) *xds.Output {
	shared := *out.Shared
	shared.Endpoints = slices.Clone(out.Shared.Endpoints)
	cla := proto.Clone(shared.Endpoints[i]).(*endpointv3.ClusterLoadAssignment)
	cla.Endpoints[0].LbEndpoints[0].GetEndpoint().Address = fixtureAddress("127.0.0.1", port)
	shared.Endpoints[i] = cla
	return shareAll(&xds.Output{Shared: &shared, Groups: out.Groups, Proxyless: out.Proxyless})
}

func newCacheServer(t *testing.T, out *xds.Output) *Server {
	s := NewServer(ServerConfig{Logger: zerolog.Nop()})
	if _, err := s.Update(context.Background(), out, resolveEdge); err != nil {
		t.Fatal(err)
	}
	s.sawNode("edge")
	return s
}

// TestSotwEndpointsSendOnlyWhatChanged: a health flip sends SotW EDS
// subscribers the one ClusterLoadAssignment that changed (nothing to
// those not subscribed to it), CDS and LDS subscribers nothing; a cluster
// change sends CDS in full.
func TestSotwEndpointsSendOnlyWhatChanged(t *testing.T) {
	out := testOutput(t, []string{"api", "web", "db"}, 8080)
	s := newCacheServer(t, out)
	all := newSotwClient(t, s.cache, "edge", resourcev3.EndpointType, []string{"api", "web", "db"})
	webOnly := newSotwClient(t, s.cache, "edge", resourcev3.EndpointType, []string{"web"})
	cds := newSotwClient(t, s.cache, "edge", resourcev3.ClusterType, nil)
	lds := newSotwClient(t, s.cache, "edge", resourcev3.ListenerType, nil)
	if g := all.mustTake("first EDS"); !slices.Equal(g.names, []string{"api", "db", "web"}) {
		t.Fatalf("first EDS response = %v, want all three", g.names)
	}
	webOnly.mustTake("first EDS")
	if g := cds.mustTake("first CDS"); len(g.names) != 3 {
		t.Fatalf("first CDS = %v", g.names)
	}
	lds.mustTake("first LDS")
	all.mustNotTake("after ACK")

	out2 := withEndpointPort(out, 0, 9999) // api
	if _, err := s.Update(context.Background(), out2, resolveEdge); err != nil {
		t.Fatal(err)
	}
	g := all.mustTake("EDS after flip")
	if !slices.Equal(g.names, []string{"api"}) {
		t.Errorf("EDS after flip = %v, want only api", g.names)
	}
	if want := s.versionsOf("edge")[resourcev3.EndpointType]; g.version != want {
		t.Errorf("version = %q, want the set's %q", g.version, want)
	}
	if len(slices.DeleteFunc(slices.Collect(maps.Keys(all.sub.ReturnedResources())), func(n string) bool { return n == cache.SetMark })) != 3 {
		t.Errorf("returned = %v, want all three still known", all.sub.ReturnedResources())
	}
	webOnly.mustNotTake("web subscriber after api flip")
	cds.mustNotTake("CDS after a flip")
	lds.mustNotTake("LDS after a flip")

	// The same content again (new objects): nothing is sent.
	if _, err := s.Update(context.Background(), withEndpointPort(out, 0, 9999), resolveEdge); err != nil {
		t.Fatal(err)
	}
	all.mustNotTake("EDS after an identical translation")

	// A cluster removed: CDS in full, without it.
	out3 := testOutput(t, []string{"api", "web"}, 8080)
	if _, err := s.Update(context.Background(), out3, resolveEdge); err != nil {
		t.Fatal(err)
	}
	if g := cds.mustTake("CDS after removal"); !slices.Equal(g.names, []string{"api", "web"}) {
		t.Errorf("CDS after removal = %v", g.names)
	}
}

// TestEntriesAreSharedAndReused: streams get the same marshalled Any, and a
// translation with equal content reuses entries (no new marshalling
// output, same versions).
func TestEntriesAreSharedAndReused(t *testing.T) {
	out := testOutput(t, []string{"api", "web"}, 8080)
	s := newCacheServer(t, out)
	a := newSotwClient(t, s.cache, "edge", resourcev3.EndpointType, []string{"api", "web"})
	b := newDeltaClient(t, s.cache, "", resourcev3.EndpointType, []string{"api", "web"})
	c := newSotwClient(t, s.cache, "", resourcev3.EndpointType, []string{"api", "web"})
	ga, gb, gc := a.mustTake("sotw"), b.mustTake("delta"), c.mustTake("sotw, other key")
	// The responses handed to the server carry the very same Anys (same
	// marshalled bytes), whatever the stream, key or protocol.
	if len(ga.wire) != 2 || len(gb.wire) != 2 || len(gc.wire) != 2 {
		t.Fatalf("responses carry %d, %d, %d resources, want 2 each", len(ga.wire), len(gb.wire), len(gc.wire))
	}
	for i := range 2 {
		if ga.wire[i] != gb.wire[i] || ga.wire[i] != gc.wire[i] {
			t.Fatalf("resource %s: each response carries its own Any; want one shared by all streams", ga.names[i])
		}
	}
	before := s.cache.Served("edge")[resourcev3.EndpointType]
	for _, cl := range []*cacheClient{a, b, c} {
		cl.ack()
	}
	if _, err := s.Update(context.Background(), testOutput(t, []string{"api", "web"}, 8080), resolveEdge); err != nil {
		t.Fatal(err)
	}
	// Nothing changed for a proxy: nothing is sent, SotW or delta.
	a.mustNotTake("sotw after an equal translation")
	b.mustNotTake("delta after an equal translation")
	c.mustNotTake("sotw, other key, after an equal translation")
	// Equal content in new objects: the same version and the very same
	// encodings (no marshalling output of its own). The set may be new,
	// holding the new objects, so the next build finds them by identity.
	after := s.cache.Served("edge")[resourcev3.EndpointType]
	if after.Version() != before.Version() {
		t.Errorf("an equal translation moved the endpoint version from %q to %q", before.Version(), after.Version())
	}
	for i, e := range after.Entries() {
		if e.Any() != before.Entries()[i].Any() {
			t.Errorf("%s: an equal translation encoded it anew", e.Name())
		}
	}
	// The delta resource version is go-control-plane's HashResource of the
	// deterministic encoding, so clients of the snapshot cache (or an
	// older bridge) reconnecting with initial_resource_versions keep theirs.
	for _, e := range ga.any {
		b, err := cachev3.MarshalResource(e.Resource())
		if err != nil {
			t.Fatal(err)
		}
		if e.Version() != cachev3.HashResource(b) {
			t.Errorf("%s: version %q, want HashResource %q", e.Name(), e.Version(), cachev3.HashResource(b))
		}
	}
}

// TestRejectedVersionIsNotResent: a SotW client that NACKs (a request
// with the old version_info and the new nonce) gets nothing until the
// content changes again.
func TestRejectedVersionIsNotResent(t *testing.T) {
	out := testOutput(t, []string{"api"}, 8080)
	s := newCacheServer(t, out)
	cl := newSotwClient(t, s.cache, "edge", resourcev3.ClusterType, nil)
	cl.mustTake("first")
	good := cl.ver
	out2 := testOutput(t, []string{"api", "web"}, 8080)
	if _, err := s.Update(context.Background(), out2, resolveEdge); err != nil {
		t.Fatal(err)
	}
	// Take the response but answer with the old version (a NACK).
	r := <-cl.ch
	cl.sub.SetReturnedResources(r.GetReturnedResources())
	cl.nonce++
	cl.ver = good
	cl.watch(nil)
	cl.mustNotTake("after NACK")
	if _, err := s.Update(context.Background(), testOutput(t, []string{"api", "web", "db"}, 8080), resolveEdge); err != nil {
		t.Fatal(err)
	}
	if g := cl.mustTake("next change"); len(g.names) != 3 {
		t.Errorf("next change = %v", g.names)
	}
}

// TestResubscribedResourceIsResent: a name dropped from a SotW EDS
// subscription and asked for again is sent again though unchanged.
func TestResubscribedResourceIsResent(t *testing.T) {
	s := newCacheServer(t, testOutput(t, []string{"api", "web"}, 8080))
	cl := newSotwClient(t, s.cache, "edge", resourcev3.EndpointType, []string{"api", "web"})
	cl.mustTake("first")
	cl.watch([]string{"api"})
	cl.mustNotTake("after unsubscribing web")
	cl.watch([]string{"api", "web"})
	if g := cl.mustTake("after resubscribing"); !slices.Equal(g.names, []string{"web"}) {
		t.Errorf("resubscribe sent %v, want web", g.names)
	}
}

// TestDeltaChangesAndRemovals: delta clients get changed resources and
// removals; a wildcard client's first request is answered even when
// empty; a client reconnecting with the versions it holds gets nothing.
func TestDeltaChangesAndRemovals(t *testing.T) {
	s := newCacheServer(t, testOutput(t, []string{"api", "web"}, 8080))
	cl := newDeltaClient(t, s.cache, "edge", resourcev3.ClusterType, nil)
	g := cl.mustTake("first")
	if !slices.Equal(g.names, []string{"api", "web"}) {
		t.Fatalf("first = %v", g.names)
	}
	if _, err := s.Update(context.Background(), testOutput(t, []string{"web"}, 8080), resolveEdge); err != nil {
		t.Fatal(err)
	}
	// web's cluster is unchanged; api is removed.
	g = cl.mustTake("after removal")
	if len(g.names) != 0 || !slices.Equal(g.removed, []string{"api"}) {
		t.Errorf("after removal: resources %v removed %v", g.names, g.removed)
	}

	empty := NewServer(ServerConfig{Logger: zerolog.Nop()})
	if _, err := empty.Update(context.Background(), shareAll(&xds.Output{Shared: &xds.Resources{}}), resolveEdge); err != nil {
		t.Fatal(err)
	}
	if g := newDeltaClient(t, empty.cache, "", resourcev3.ListenerType, nil).mustTake("empty wildcard"); len(g.names) != 0 {
		t.Errorf("empty wildcard got %v", g.names)
	}

	held := maps.Clone(cl.sub.ReturnedResources())
	again := &cacheClient{t: t, c: s.cache, node: &corev3.Node{Id: "n2", Cluster: "edge"}, typ: resourcev3.ClusterType, delta: true,
		sub: stream.NewDeltaSubscription(nil, nil, held, true), dch: make(chan cachev3.DeltaResponse, 1), nonce: 1}
	again.watch(nil)
	again.mustNotTake("reconnect with current versions")
}

// TestUnsyncedKeyWaits: before the first Update nothing is answered; the
// Update answers the waiting watch.
func TestUnsyncedKeyWaits(t *testing.T) {
	s := NewServer(ServerConfig{Logger: zerolog.Nop()})
	s.sawNode("edge")
	cl := newSotwClient(t, s.cache, "edge", resourcev3.ClusterType, nil)
	cl.mustNotTake("before sync")
	if _, err := s.Update(context.Background(), testOutput(t, []string{"api"}, 8080), resolveEdge); err != nil {
		t.Fatal(err)
	}
	if g := cl.mustTake("after sync"); !slices.Equal(g.names, []string{"api"}) {
		t.Errorf("after sync = %v", g.names)
	}
}

// TestFailedGroupKeepsItsLastGoodState: a group the translation reports
// failed keeps serving its last good listeners and routes, while the
// shared clusters and endpoints (health) still update for it and every
// other key updates whole.
func TestFailedGroupKeepsItsLastGoodState(t *testing.T) {
	good := testOutput(t, []string{"api"}, 8080)
	s := newCacheServer(t, good)
	edgeBefore := s.versionsOf("edge")
	bad := testOutput(t, []string{"api", "web"}, 8080)
	delete(bad.Groups, "edge")
	bad.Failed = map[string]error{"edge": errors.New("proxy group \"edge\": listener fails validation")}
	if _, err := s.Update(context.Background(), bad, resolveEdge); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if got := s.Served("", resourcev3.ClusterType); len(got) != 2 {
		t.Errorf("shared key serves %d clusters, want the new 2", len(got))
	}
	if got := s.Served("edge", resourcev3.ClusterType); len(got) != 2 {
		t.Errorf("failed group edge serves %d clusters, want the new 2 (endpoints and clusters keep flowing)", len(got))
	}
	got := s.versionsOf("edge")
	for _, typ := range []string{resourcev3.ListenerType, resourcev3.RouteType} {
		if got[typ] != edgeBefore[typ] || got[typ] == "" {
			t.Errorf("failed group edge %s version %q, want its last good %q", typ, got[typ], edgeBefore[typ])
		}
	}
	if len(s.Served("edge", resourcev3.ListenerType)) == 0 {
		t.Error("failed group edge lost its listeners")
	}
	// A group that never translated cleanly gets nothing: its proxies
	// wait rather than being served a world without their listeners.
	bad.Failed["new"] = errors.New("proxy group \"new\": broken")
	if _, err := s.Update(context.Background(), bad, func(nc string) string { return nc }); err != nil {
		t.Fatalf("Update: %v", err)
	}
	s.sawNode("new")
	if got := s.cache.Served("new"); got != nil {
		t.Errorf("a node of a group with no good state was served %d types, want to wait", len(got))
	}
	// Its dump says so, with the error the admin API answers 503 for.
	if _, err := s.ConfigDump("", "new"); !errors.Is(err, ErrNoGoodState) {
		t.Errorf("config_dump of a group with no good state: %v, want ErrNoGoodState", err)
	}
}

// contentVersion is the version a set of these resources gets, for tests
// that compute what a key should be served.
func contentVersion(typeURL string, items []types.Resource) (string, error) {
	ts, err := cache.NewSet(typeURL, items, nil)
	if err != nil {
		return "", err
	}
	return ts.Version(), nil
}

// TestProxiesShowAFailedGroup: /v1/proxies says which connected proxies
// are held at their last good state because their group failed, and
// stops saying it once the group translates again.
func TestProxiesShowAFailedGroup(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api"}, 8080))
	c := dial(t, s, adsclient.Config{NodeID: "edge-1", Cluster: "edge", Mode: adsclient.SotW})
	if _, err := c.Wait(waitCtx(t), func(st adsclient.State) bool { return len(st.ListenerNames()) == 1 }); err != nil {
		t.Fatal(err)
	}
	other := dial(t, s, adsclient.Config{NodeID: "other-1", Cluster: "other", Mode: adsclient.SotW})
	if _, err := other.Wait(waitCtx(t), func(st adsclient.State) bool { return len(st.ClusterNames()) == 1 }); err != nil {
		t.Fatal(err)
	}
	bad := testOutput(t, []string{"api"}, 8080)
	delete(bad.Groups, "edge")
	bad.Failed = map[string]error{"edge": errors.New(`proxy group "edge": broken`)}
	s.update(t, bad)
	if p := s.proxy("edge-1"); p == nil || !strings.Contains(p.GroupError, "broken") || p.Group != "edge" {
		t.Errorf("edge-1 = %+v, want group edge with its group error", p)
	}
	if p := s.proxy("other-1"); p == nil || p.GroupError != "" {
		t.Errorf("other-1 = %+v, want no group error", p)
	}
	s.update(t, testOutput(t, []string{"api"}, 8080))
	if p := s.proxy("edge-1"); p == nil || p.GroupError != "" {
		t.Errorf("edge-1 = %+v after the group recovered, want no group error", p)
	}
}

package serve

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// sotwEDS drives one SotW ADS stream's endpoints by hand.
type sotwEDS struct {
	t    *testing.T
	s    sotwClientStream
	node *corev3.Node
	resp chan *discoveryv3.DiscoveryResponse
}

func newSotwEDS(t *testing.T, s *testServer) *sotwEDS {
	ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(grpcConn(t, s.addr)).StreamAggregatedResources(waitCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	c := &sotwEDS{t: t, s: ads, node: &corev3.Node{Id: "sotw-eds", Cluster: "edge"}, resp: make(chan *discoveryv3.DiscoveryResponse, 8)}
	go func() {
		for {
			r, err := ads.Recv()
			if err != nil {
				close(c.resp)
				return
			}
			c.resp <- r
		}
	}()
	return c
}

func (c *sotwEDS) request(nonce string, names ...string) {
	c.t.Helper()
	if err := c.s.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: resourcev3.EndpointType, ResponseNonce: nonce, ResourceNames: names}); err != nil {
		c.t.Fatal(err)
	}
}

// next returns the names of the next response and its nonce.
func (c *sotwEDS) next(what string) ([]string, string) {
	c.t.Helper()
	select {
	case r := <-c.resp:
		var names []string
		for _, a := range r.GetResources() {
			cla := &endpointv3.ClusterLoadAssignment{}
			if err := a.UnmarshalTo(cla); err != nil {
				c.t.Fatal(err)
			}
			names = append(names, cla.GetClusterName())
		}
		slices.Sort(names)
		return names, r.GetNonce()
	case <-time.After(5 * time.Second):
		c.t.Fatalf("%s: no response", what)
		return nil, ""
	}
}

func (c *sotwEDS) none(what string) {
	c.t.Helper()
	select {
	case r := <-c.resp:
		c.t.Fatalf("%s: unexpected response %v", what, r.GetResources())
	case <-time.After(300 * time.Millisecond):
	}
}

// TestSotwStaleNonceIsIgnored: a request that does not answer the last
// response sent for its type changes nothing (Envoy's xDS protocol); the
// one that does is acted on.
func TestSotwStaleNonceIsIgnored(t *testing.T) {
	out := testOutput(t, []string{"api", "web", "db"}, 8080)
	s := startServer(t, ServerConfig{})
	s.update(t, out)
	c := newSotwEDS(t, s)
	c.request("", "api")
	_, n1 := c.next("first")
	c.request(n1, "api")
	out = withEndpointPort(out, 0, 9100)
	s.update(t, out)
	got, n2 := c.next("api change")
	if !slices.Equal(got, []string{"api"}) {
		t.Fatalf("api change sent %v", got)
	}
	c.request(n1, "api", "web") // crossed the api change
	c.none("a request with a stale nonce")
	c.request(n2, "api", "web")
	if got, _ := c.next("web subscribed"); !slices.Equal(got, []string{"web"}) {
		t.Fatalf("subscribing web sent %v", got)
	}
}

// TestSotwACKGetsWhatChangedInFlight: SotW streams get the changes that
// land while a response is unacknowledged once they ACK it (one change or
// several), and a request that swaps one name for another (same count)
// gets the new one.
func TestSotwACKGetsWhatChangedInFlight(t *testing.T) {
	out := testOutput(t, []string{"api", "web", "db", "cache"}, 8080)
	s := startServer(t, ServerConfig{})
	s.update(t, out)
	c := newSotwEDS(t, s)
	names := []string{"api", "web", "db"}
	c.request("", names...)
	if got, _ := c.next("first"); !slices.Equal(got, []string{"api", "db", "web"}) {
		t.Fatalf("first = %v", got)
	}
	c.request("1", names...)
	c.none("ACK with nothing changed")

	out = withEndpointPort(out, 0, 9100)
	s.update(t, out)
	_, n := c.next("api change")
	out = withEndpointPort(out, 1, 9101) // web, before the ACK
	s.update(t, out)
	c.request(n, names...)
	got, n := c.next("one change in flight")
	if !slices.Equal(got, []string{"web"}) {
		t.Fatalf("one change in flight: %v, want web", got)
	}
	out = withEndpointPort(out, 0, 9102)
	s.update(t, out)
	out = withEndpointPort(out, 2, 9103)
	s.update(t, out)
	c.request(n, names...)
	got, n = c.next("two changes in flight")
	if !slices.Equal(got, []string{"api", "db"}) {
		t.Fatalf("two changes in flight: %v, want api and db", got)
	}
	c.request(n, "api", "web", "cache") // db swapped for cache
	if got, _ := c.next("cache subscribed"); !slices.Equal(got, []string{"cache"}) {
		t.Fatalf("swapping db for cache sent %v", got)
	}
}

// TestSotwServerACKTakesTheFastPath drives the SotW server's stream
// handling itself: an ACK naming what the request before did is compared
// only with what changed since the stream's last answer, so a held name
// dropped behind the mark's back is not sent again; a request naming
// other resources is compared in full and gets it.
func TestSotwServerACKTakesTheFastPath(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"api", "web"}, 8080))
	srv := newSotwServer(context.Background(), s.cache, s.cb)
	st := &sotwStream{s: srv, typeURL: resourcev3.AnyType}
	st.init(1 << 40)
	if err := s.cb.OnStreamOpen(context.Background(), st.id, resourcev3.AnyType); err != nil {
		t.Fatal(err)
	}
	defer st.close()
	node := &corev3.Node{Id: "fast-path", Cluster: "edge"}
	// taken empties the stream's queue, as sending would, and returns the
	// names of what was queued.
	taken := func() [][]string {
		st.out.mu.Lock()
		defer st.out.mu.Unlock()
		var got [][]string
		for _, r := range st.out.pending {
			got = append(got, slices.Sorted(maps.Keys(r.GetReturnedResources())))
		}
		st.out.pending = nil
		return got
	}
	request := func(nonce string, names ...string) {
		t.Helper()
		if err := st.actOn(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.EndpointType, ResponseNonce: nonce, ResourceNames: names}); err != nil {
			t.Fatal(err)
		}
	}
	request("", "api", "web")
	if got := taken(); len(got) != 1 {
		t.Fatalf("first request: %d answers, want 1", len(got))
	}
	st.sent.set(resourcev3.EndpointType, 1)
	request("1", "api", "web")
	if got := taken(); len(got) != 0 {
		t.Fatalf("ACK with nothing changed: answers %v", got)
	}
	w, _ := st.watchFor(resourcev3.EndpointType, nil)
	delete(w.subscription().ReturnedResources(), "api") // behind the mark's back
	request("1", "api", "web")
	if got := taken(); len(got) != 0 {
		t.Fatalf("an ACK with the same names was compared in full: answers %v", got)
	}
	request("1", "api")
	if got := taken(); len(got) != 1 || !slices.Contains(got[0], "api") {
		t.Fatalf("a request with other names: answers %v, want api again", got)
	}
}

package adsclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

var modes = []Mode{SotW, Delta}

// unacked returns the responses that no later request ACKed with the
// response's nonce, no error_detail and, in SotW, the response's version.
func unacked(ev []event, mode Mode, skip func(event) bool) []event {
	var out []event
	for i, r := range ev {
		if !r.response || skip(r) {
			continue
		}
		acked := slices.ContainsFunc(ev[i+1:], func(q event) bool {
			return !q.response && q.typ == r.typ && q.nonce == r.nonce && q.errorDetail == "" &&
				(mode == Delta || q.version == r.version)
		})
		if !acked {
			out = append(out, r)
		}
	}
	return out
}

func allAcked(mode Mode, skip func(event) bool) func([]event) bool {
	return func(ev []event) bool { return len(unacked(ev, mode, skip)) == 0 }
}

func never(event) bool { return false }

func TestLifecycle(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			testLifecycle(t, mode)
		})
	}
}

func testLifecycle(t *testing.T, mode Mode) {
	srv := startServer(t)
	var (
		mu      sync.Mutex
		updates []Update
	)
	c := dial(t, srv, Config{
		Cluster: "test",
		Mode:    mode,
		NACK: func(typeURL, version string, _ []*anypb.Any) error {
			if typeURL == ClusterType && version == "3" {
				return errors.New("version 3 is rejected by the test")
			}
			return nil
		},
		OnUpdate: func(u Update) {
			mu.Lock()
			updates = append(updates, u)
			mu.Unlock()
		},
	})
	ctx := waitCtx(t)

	// 1: two clusters, their endpoints, a listener and its routes.
	srv.set(t, makeSnapshot(t, "1", map[string][]string{
		"api": {"10.0.0.1:8080", "10.0.0.2:8080"},
		"web": {"10.0.1.1:80"},
	}))
	st, err := c.Wait(ctx, func(s State) bool {
		return slices.Equal(s.ClusterNames(), []string{"api", "web"}) &&
			len(s.Endpoints("api")) == 2 && len(s.Endpoints("web")) == 1 &&
			slices.Equal(s.ListenerNames(), []string{"http"}) &&
			s.RouteConfig("local_route") != nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{ClusterType, EndpointType, ListenerType, RouteType} {
		if v := st.Version(typ); v != "1" {
			t.Errorf("%s version = %q, want 1", shortType(typ), v)
		}
	}
	if got, want := st.LoadAssignmentNames(), []string{"api-eds", "web"}; !slices.Equal(got, want) {
		t.Errorf("EDS names = %v, want %v", got, want)
	}
	wantAPI := []Endpoint{{Address: "10.0.0.1:8080", Health: "HEALTHY"}, {Address: "10.0.0.2:8080", Health: "HEALTHY"}}
	if diff := cmp.Diff(wantAPI, st.Endpoints("api")); diff != "" {
		t.Errorf("api endpoints (-want +got):\n%s", diff)
	}
	ev := srv.eventually(t, "ACKs for version 1", allAcked(mode, never))
	checkStartup(t, mode, ev)

	// 2: web goes away, api gains an endpoint.
	srv.set(t, makeSnapshot(t, "2", map[string][]string{
		"api": {"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"},
	}))
	st, err = c.Wait(ctx, func(s State) bool {
		return slices.Equal(s.ClusterNames(), []string{"api"}) && len(s.Endpoints("api")) == 3
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.LoadAssignmentNames(); !slices.Equal(got, []string{"api-eds"}) {
		t.Errorf("EDS names after removing web = %v, want [api-eds]", got)
	}
	if st.Endpoints("web") != nil || st.Cluster("web") != nil {
		t.Errorf("web still present: %v", st)
	}
	ev = srv.eventually(t, "ACKs for version 2", allAcked(mode, never))
	unsubscribed := slices.ContainsFunc(ev, func(e event) bool {
		if e.response || e.typ != EndpointType {
			return false
		}
		if mode == Delta {
			return slices.Equal(e.unsubscribe, []string{"web"})
		}
		return slices.Equal(e.names, []string{"api-eds"})
	})
	if !unsubscribed {
		t.Errorf("client never dropped the EDS subscription of web; wire log:\n%s", dump(ev))
	}

	mu.Lock()
	prev := 0
	for _, u := range updates {
		n := len(u.State.Endpoints("api"))
		if n < prev {
			t.Errorf("update %s v%s (nonce %s) left api with %d endpoints, had %d", shortType(u.TypeURL), u.Version, u.Nonce, n, prev)
		}
		prev = n
	}
	mu.Unlock()

	// 3: NACKed by the NACK func; the server must see the previous version.
	srv.set(t, makeSnapshot(t, "3", map[string][]string{"api": {"10.0.0.1:8080"}}, makeCluster("bad")))
	ev = srv.eventually(t, "a CDS NACK", func(ev []event) bool {
		for i, r := range ev {
			if !r.response || r.typ != ClusterType || r.version != "3" {
				continue
			}
			for _, q := range ev[i+1:] {
				if !q.response && q.typ == ClusterType && q.nonce == r.nonce && q.errorDetail != "" &&
					(mode == Delta || q.version == "2") {
					return true
				}
			}
		}
		return false
	})
	if st := c.Snapshot(); st.Version(ClusterType) != "2" || st.Cluster("bad") != nil {
		t.Errorf("NACKed CDS was applied: %v", st)
	}
	if n := c.Stats().NACKs[ClusterType]; n < 1 {
		t.Errorf("Stats().NACKs[CDS] = %d, want >= 1", n)
	}

	// 4: accepted again.
	srv.set(t, makeSnapshot(t, "4", map[string][]string{
		"api":   {"10.0.0.1:8080", "10.0.0.4:8080"},
		"extra": {"10.0.2.1:80"},
	}))
	st, err = c.Wait(ctx, func(s State) bool {
		return s.Version(ClusterType) == "4" && slices.Equal(s.ClusterNames(), []string{"api", "extra"}) &&
			len(s.Endpoints("extra")) == 1 && slices.Equal(endpointAddrs(s.Endpoints("api")), []string{"10.0.0.1:8080", "10.0.0.4:8080"})
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.eventually(t, "ACKs for version 4", allAcked(mode, func(e event) bool {
		return e.typ == ClusterType && e.version == "3"
	}))

	stats := c.Stats()
	t.Logf("stats: %+v", stats)
	if stats.Responses[ClusterType] < 3 || stats.Responses[EndpointType] < 2 || stats.Requests[ClusterType] < 4 {
		t.Errorf("implausible stats %+v", stats)
	}
	if rs := c.Responses(); len(rs) == 0 || rs[0].TypeURL != ClusterType || rs[0].Version != "1" || rs[0].Resources != 2 {
		t.Errorf("first recorded response = %+v, want CDS v1 with 2 resources", rs[0])
	}

	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if !errors.Is(c.Err(), ErrClosed) {
		t.Errorf("Err after Close = %v", c.Err())
	}
	if _, err := c.Wait(ctx, func(State) bool { return false }); !errors.Is(err, ErrClosed) {
		t.Errorf("Wait after Close = %v, want ErrClosed", err)
	}
}

// checkStartup asserts the Envoy request pattern of a fresh stream: node on
// every request, wildcard CDS first, EDS requested before the CDS ACK, and
// LDS only after the clusters warmed.
func checkStartup(t *testing.T, mode Mode, ev []event) {
	t.Helper()
	var reqs []event
	for _, e := range ev {
		if !e.response {
			reqs = append(reqs, e)
		}
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format+"; wire log:\n%s", append(args, dump(ev))...)
	}
	for _, r := range reqs {
		if r.node != testNode {
			fail("request %s without node id", shortType(r.typ))
			return
		}
	}
	if r := reqs[0]; r.typ != ClusterType || len(r.names) != 0 || r.nonce != "" {
		fail("first request = %+v, want wildcard CDS", r)
	}
	idx := func(pred func(event) bool) int { return slices.IndexFunc(reqs, pred) }
	firstEDS := idx(func(e event) bool { return e.typ == EndpointType })
	cdsACK := idx(func(e event) bool { return e.typ == ClusterType && e.nonce != "" })
	edsACK := idx(func(e event) bool { return e.typ == EndpointType && e.nonce != "" })
	firstLDS := idx(func(e event) bool { return e.typ == ListenerType })
	firstRDS := idx(func(e event) bool { return e.typ == RouteType })
	ldsACK := idx(func(e event) bool { return e.typ == ListenerType && e.nonce != "" })
	switch {
	case firstEDS < 0 || cdsACK < 0 || edsACK < 0 || firstLDS < 0 || firstRDS < 0 || ldsACK < 0:
		fail("missing requests")
	case firstEDS > cdsACK:
		fail("EDS subscription sent after the CDS ACK")
	case firstLDS < edsACK:
		fail("LDS requested before the clusters warmed")
	case firstRDS > ldsACK:
		fail("RDS subscription sent after the LDS ACK")
	}
	if got := reqs[firstEDS].names; !slices.Equal(got, []string{"api-eds", "web"}) {
		fail("first EDS request names = %v", got)
	}
	if got := reqs[firstRDS].names; !slices.Equal(got, []string{"local_route"}) {
		fail("first RDS request names = %v", got)
	}
}

func endpointAddrs(eps []Endpoint) []string {
	var out []string
	for _, e := range eps {
		out = append(out, e.Address)
	}
	return out
}

// An EDS cluster without eds_cluster_config is rejected by Envoy, so the
// client must NACK it on its own, and LDS must still start.
func TestRejectsWhatEnvoyRejects(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			srv := startServer(t)
			c := dial(t, srv, Config{Mode: mode})
			broken := makeCluster("broken")
			broken.EdsClusterConfig = nil
			srv.set(t, makeSnapshot(t, "1", nil, broken))

			if _, err := c.Wait(waitCtx(t), func(s State) bool { return s.Listener("http") != nil }); err != nil {
				t.Fatal(err)
			}
			srv.eventually(t, "a CDS NACK naming the missing EDS config", func(ev []event) bool {
				return slices.ContainsFunc(ev, func(e event) bool {
					return !e.response && e.typ == ClusterType && strings.Contains(e.errorDetail, "without an EDS config")
				})
			})
			if st := c.Snapshot(); len(st.ClusterNames()) != 0 {
				t.Errorf("rejected clusters kept: %v", st.ClusterNames())
			}
		})
	}
}

// With a ClusterLoadAssignment missing, Envoy holds LDS back until its
// initial fetch timeout.
func TestLDSWaitsForClusterWarming(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			srv := startServer(t)
			const timeout = 300 * time.Millisecond
			start := time.Now()
			c := dial(t, srv, Config{Mode: mode, InitialFetchTimeout: timeout})
			snap := makeSnapshot(t, "1", nil, makeCluster("orphan"))
			srv.set(t, snap)

			if _, err := c.Wait(waitCtx(t), func(s State) bool { return len(s.ClusterNames()) == 1 }); err != nil {
				t.Fatal(err)
			}
			short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := c.Wait(short, func(s State) bool { return s.Listener("http") != nil })
			if time.Since(start) < timeout {
				if err == nil {
					t.Fatal("listener arrived while the cluster was still warming")
				}
				if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for EDS [orphan]") {
					t.Errorf("Wait error = %v, want a deadline naming the warming cluster", err)
				}
			}
			if _, err := c.Wait(waitCtx(t), func(s State) bool { return s.Listener("http") != nil }); err != nil {
				t.Fatal(err)
			}
			if elapsed := time.Since(start); elapsed < timeout {
				t.Errorf("listener after %v, before the %v initial fetch timeout", elapsed, timeout)
			}
		})
	}
}

func TestWaitDescribesState(t *testing.T) {
	srv := startServer(t)
	c := dial(t, srv, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := c.Wait(ctx, func(s State) bool { return false })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no CDS response") {
		t.Errorf("Wait = %v", err)
	}
}

func TestDialFailsWithoutServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Nothing listens on port 1 of loopback.
	if _, err := Dial(ctx, Config{Addr: "127.0.0.1:1", NodeID: "n"}); err == nil {
		t.Error("Dial to a closed port succeeded")
	}
	if _, err := Dial(ctx, Config{Addr: "127.0.0.1:1"}); err == nil {
		t.Error("Dial without NodeID succeeded")
	}
}

func TestEndpoints(t *testing.T) {
	lb := func(addr string, h corev3.HealthStatus, w uint32) *endpointv3.LbEndpoint {
		e := &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: socketAddress(addr)}},
			HealthStatus:   h,
		}
		if w > 0 {
			e.LoadBalancingWeight = wrapperspb.UInt32(w)
		}
		return e
	}
	static := &clusterv3.Cluster{
		Name:                 "static",
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: "static", Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{lb("127.0.0.1:9000", corev3.HealthStatus_UNKNOWN, 0)},
		}}},
	}
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: "api-eds", Endpoints: []*endpointv3.LocalityLbEndpoints{
		{Priority: 1, LbEndpoints: []*endpointv3.LbEndpoint{lb("10.0.0.9:80", corev3.HealthStatus_HEALTHY, 0)}},
		{LbEndpoints: []*endpointv3.LbEndpoint{
			lb("10.0.0.2:80", corev3.HealthStatus_UNHEALTHY, 5),
			lb("[::1]:80", corev3.HealthStatus_DRAINING, 0),
		}},
	}}
	st := State{Types: map[string]TypeState{
		ClusterType:  {Resources: map[string]proto.Message{"api": makeCluster("api"), "static": static}},
		EndpointType: {Resources: map[string]proto.Message{"api-eds": cla}},
	}}
	want := []Endpoint{
		{Address: "10.0.0.2:80", Health: "UNHEALTHY", Weight: 5},
		{Address: "[::1]:80", Health: "DRAINING"},
		{Address: "10.0.0.9:80", Health: "HEALTHY", Priority: 1},
	}
	if diff := cmp.Diff(want, st.Endpoints("api")); diff != "" {
		t.Errorf("Endpoints(api) via service_name (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, st.Endpoints("api-eds")); diff != "" {
		t.Errorf("Endpoints(api-eds) by EDS name (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Endpoint{{Address: "127.0.0.1:9000", Health: "UNKNOWN"}}, st.Endpoints("static")); diff != "" {
		t.Errorf("Endpoints(static) inline (-want +got):\n%s", diff)
	}
	if got := st.Endpoints("nope"); got != nil {
		t.Errorf("Endpoints(nope) = %v", got)
	}
	if s := fmt.Sprint(st); !strings.Contains(s, "api-eds(3)") {
		t.Errorf("String() = %q, want EDS endpoint counts", s)
	}
}

func TestResponseLogKeepsNewest(t *testing.T) {
	c := &Client{stats: Stats{Responses: map[string]int{}, NACKs: map[string]int{}}}
	const n = maxResponseLog + 10
	for i := range n {
		c.recordLocked(ResponseInfo{TypeURL: ClusterType, Nonce: fmt.Sprint(i)})
	}
	rs := c.Responses()
	if len(rs) != maxResponseLog || rs[0].Nonce != "10" || rs[len(rs)-1].Nonce != fmt.Sprint(n-1) {
		t.Errorf("kept %d responses from nonce %s to %s", len(rs), rs[0].Nonce, rs[len(rs)-1].Nonce)
	}
	if c.Stats().Responses[ClusterType] != n {
		t.Errorf("counter = %d, want %d", c.Stats().Responses[ClusterType], n)
	}
}

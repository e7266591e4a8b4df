package serve

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestRESTOnTheGRPCPort: plaintext HTTP/1.1 REST polls and a gRPC stream
// share the port; before the first snapshot REST answers 503 (never a
// partial world), then the gRPC client's version; a connection that
// sends nothing is dropped after the handshake timeout.
func TestRESTOnTheGRPCPort(t *testing.T) {
	defer func(d time.Duration) { handshakeTimeout = d }(handshakeTimeout)
	handshakeTimeout = 300 * time.Millisecond
	s := startServer(t, ServerConfig{})
	hc := &http.Client{Timeout: 5 * time.Second}
	base := "http://" + s.addr
	node := &corev3.Node{Id: "edge-rest", Cluster: "edge"}
	ctx := waitCtx(t)
	r, err := adsclient.FetchREST(ctx, hc, base, adsclient.ClusterType, node, "")
	if err != nil || r.Status != http.StatusServiceUnavailable {
		t.Fatalf("REST before the first snapshot: %+v %v, want 503", r, err)
	}
	s.update(t, testOutput(t, []string{"a", "b"}, 8080))
	c := dial(t, s, adsclient.Config{NodeID: "edge-grpc", Cluster: "edge"})
	st, err := c.Wait(ctx, func(st adsclient.State) bool { return len(st.ClusterNames()) == 2 })
	if err != nil {
		t.Fatal(err)
	}
	r, err = adsclient.FetchREST(ctx, hc, base, adsclient.ClusterType, node, "")
	if err != nil || r.Status != http.StatusOK || r.Version != st.Version(adsclient.ClusterType) || len(r.Resources) != 2 {
		t.Fatalf("REST CDS = %+v %v; gRPC has version %s", r, err, st.Version(adsclient.ClusterType))
	}
	r, err = adsclient.FetchREST(ctx, hc, base, adsclient.EndpointType, node, "", "a")
	if err != nil || r.Status != http.StatusOK || len(r.Resources) != 1 || r.Resources["a"] == nil {
		t.Fatalf("REST EDS for [a] = %+v %v", r, err)
	}
	if r, err := adsclient.FetchREST(ctx, hc, base, adsclient.ClusterType, node, st.Version(adsclient.ClusterType)); err != nil || r.Status != http.StatusNotModified {
		t.Fatalf("REST CDS at the current version = %+v %v, want 304", r, err)
	}
	s.update(t, testOutput(t, []string{"a", "b", "c"}, 8080))
	if r, err := adsclient.FetchREST(ctx, hc, base, adsclient.ClusterType, node, st.Version(adsclient.ClusterType)); err != nil || r.Status != http.StatusOK || len(r.Resources) != 3 {
		t.Fatalf("REST CDS after an update = %+v %v, want the 3 clusters", r, err)
	}
	resp, err := hc.Get(base + "/v3/discovery:clusters")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET = %d, want 405", resp.StatusCode)
	}

	idle, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idle.SetReadDeadline(time.Now().Add(handshakeTimeout + 3*time.Second))
	start := time.Now()
	if _, err := idle.Read(make([]byte, 1)); err == nil || time.Since(start) > handshakeTimeout+time.Second {
		t.Fatalf("silent connection: read err %v after %v, want closed after about %v", err, time.Since(start), handshakeTimeout)
	}
}

// TestHistory: a node's pushes, ACKs and NACKs are kept newest first,
// at most historyLen of them, and forgotten when its last stream goes.
func TestHistory(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"a"}, 8080))
	c := dial(t, s, adsclient.Config{NodeID: "h-1", Cluster: "edge", NACK: rejectCluster("b")})
	ctx := waitCtx(t)
	if _, err := c.Wait(ctx, func(st adsclient.State) bool { return len(st.ClusterNames()) == 1 }); err != nil {
		t.Fatal(err)
	}
	s.update(t, testOutput(t, []string{"a", "b"}, 8080))
	eventually(t, "a NACK in the history", func() bool {
		h := s.History("h-1")
		return slices.ContainsFunc(h, func(e HistoryEvent) bool {
			return e.Event == "nack" && e.Type == "CDS" && strings.Contains(e.Error, "rejected by the test")
		}) && slices.ContainsFunc(h, func(e HistoryEvent) bool {
			return e.Event == "push" && e.Type == "CDS" && e.Resources == 2 && e.Version != "" && e.Error == ""
		}) && slices.ContainsFunc(h, func(e HistoryEvent) bool {
			return e.Event == "ack" && e.Type == "CDS" && e.Version != "" && e.Resources == 0
		}) && h[0].At.After(h[len(h)-1].At) && time.Since(h[0].At) < time.Minute
	}, func() string { return fmt.Sprint(s.History("h-1")) })
	for i := 0; i < 200 && len(s.History("h-1")) < historyLen; i++ {
		s.update(t, testOutput(t, []string{"a"}, uint32(9000+i)))
		time.Sleep(5 * time.Millisecond)
	}
	for i := range 10 {
		s.update(t, testOutput(t, []string{"a", "c"}, uint32(9500+i)))
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(s.History("h-1")); n != historyLen {
		t.Fatalf("history holds %d events, want the bound %d", n, historyLen)
	}
	for _, e := range s.History("h-1") {
		if !strings.HasPrefix(e.Stream, "sotw-") && !strings.HasPrefix(e.Stream, "delta-") {
			t.Fatalf("event %+v names no stream", e)
		}
	}
	c.Close()
	eventually(t, "the history forgotten", func() bool { return s.History("h-1") == nil }, func() string { return fmt.Sprint(s.History("h-1")) })
}

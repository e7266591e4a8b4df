package adsclient

import (
	"slices"
	"testing"
	"time"
)

// TestACKAfterOnUpdate: the client queues a response's ACK only once
// OnUpdate has returned, as Envoy queues it after onConfigUpdate; while
// OnUpdate runs, go-control-plane's server (which logs every request it
// reads) has not had it. The agent's relay relies on this order: its
// OnUpdate only hands the update to a worker, which then runs after the
// ACK has gone out.
func TestACKAfterOnUpdate(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			srv := startServer(t)
			inUpdate, release := make(chan struct{}), make(chan struct{})
			dial(t, srv, Config{
				Cluster: "test",
				Mode:    mode,
				OnUpdate: func(u Update) {
					if u.TypeURL == ClusterType && u.Version == "2" {
						close(inUpdate)
						<-release
					}
				},
			})
			srv.set(t, makeSnapshot(t, "1", map[string][]string{"api": {"10.0.0.1:8080"}}))
			srv.eventually(t, "ACKs for version 1", allAcked(mode, never))
			srv.set(t, makeSnapshot(t, "2", map[string][]string{"api": {"10.0.0.1:8080"}, "web": {"10.0.1.1:80"}}))
			select {
			case <-inUpdate:
			case <-time.After(10 * time.Second):
				t.Fatal("OnUpdate never saw CDS version 2")
			}
			other := func(e event) bool { return e.typ != ClusterType || e.version != "2" }
			cdsV2 := func(ev []event) bool {
				sent := slices.ContainsFunc(ev, func(e event) bool { return e.response && !other(e) })
				return sent && len(unacked(ev, mode, other)) == 0
			}
			time.Sleep(200 * time.Millisecond) // time for an early ACK to reach the server
			if ev := srv.log(); cdsV2(ev) {
				t.Errorf("CDS version 2 was ACKed while OnUpdate still ran; wire log:\n%s", dump(ev))
			}
			close(release)
			srv.eventually(t, "the CDS ACK of version 2 after OnUpdate", cdsV2)
		})
	}
}

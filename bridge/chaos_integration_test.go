package bridge_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// checkInterval is long enough that a restarted agent reports checks
// critical for a while before they run again.
var checkInterval = "6s"

// backend is a live HTTP server whose /health Consul checks.
func backend(t *testing.T) int {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }))
	t.Cleanup(srv.Close)
	port, _ := strconv.Atoi(srv.URL[strings.LastIndex(srv.URL, ":")+1:])
	return port
}

// registerHTTP registers an instance with an HTTP check. Without an
// initial status the check is critical until it first runs, like most real
// registrations.
func registerHTTP(t *testing.T, c *api.Client, service, id string, port int, initial string) {
	t.Helper()
	err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: id, Name: service, Address: "127.0.0.1", Port: port,
		Check: &api.AgentServiceCheck{HTTP: fmt.Sprintf("http://127.0.0.1:%d/health", port), Interval: checkInterval, Timeout: "1s", Status: initial},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// minHealthy records, per cluster, the fewest healthy endpoints a client
// held after the recording started.
type minHealthy struct {
	mu  sync.Mutex
	on  bool
	min map[string]int
}

func (m *minHealthy) onUpdate(u adsclient.Update) {
	if u.TypeURL != adsclient.EndpointType {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.on {
		return
	}
	for _, name := range u.State.LoadAssignmentNames() {
		n := healthy(u.State.Endpoints(name))
		if cur, ok := m.min[name]; !ok || n < cur {
			m.min[name] = n
		}
	}
}

func (m *minHealthy) start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.on, m.min = true, map[string]int{}
}

// stop ends the recording; what the client holds later is not counted.
func (m *minHealthy) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.on = false
}

func (m *minHealthy) result() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.min
}

// TestConsulServerRestart kills the Consul server and starts it again on
// the same data dir. The restarted agent reports its HTTP checks critical
// until each has run once, and may answer for a service before it has
// registered the service's instances again; the test measures how often
// proxies see those transient downgrades with and without
// consul.reconnect_hold, asserts that the hold removes them, that an
// instance deregistered during the window leaves proxies when it ends, and
// that new instances flow again afterwards.
func TestConsulServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts Consul and waits for its checks: ~45s")
	}
	for _, hold := range []time.Duration{0, 15 * time.Second} {
		t.Run("hold="+hold.String(), func(t *testing.T) {
			agent := consultest.Start(t, consultest.WithDataDir(""))
			services := []string{"web", "api", "carts"}
			for _, svc := range services {
				for i := 1; i <= 2; i++ {
					registerHTTP(t, agent.Client(), svc, fmt.Sprintf("%s-%d", svc, i), backend(t), "")
				}
			}
			h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
				c.Settings.Consul.ReconnectHold = hold
			})
			rec := [2]*minHealthy{{}, {}}
			clients := [2]*adsclient.Client{}
			for i, mode := range []adsclient.Mode{adsclient.SotW, adsclient.Delta} {
				clients[i] = dialRaw(t, h, mode, rec[i].onUpdate)
			}
			for _, svc := range services {
				for _, c := range clients {
					waitHealthy(t, c, svc, 2)
				}
			}

			rec[0].start()
			rec[1].start()
			agent.Kill()
			time.Sleep(2 * time.Second)
			agent.Restart(t)
			// A real removal while the hold runs: proxies get it when the
			// window ends, not before (a restarted Consul without its state
			// lists services without instances until its agents register
			// them again, and the hold keeps what it knew).
			if err := agent.Client().Agent().ServiceDeregister("carts-2"); err != nil {
				t.Fatal(err)
			}
			// Let the restarted agent run its checks and the hold expire;
			// with a hold, the record ends before the window does.
			if hold > 0 {
				time.Sleep(hold - 3*time.Second)
				rec[0].stop()
				rec[1].stop()
				time.Sleep(6 * time.Second)
			} else {
				time.Sleep(3 * time.Second)
			}
			for i, c := range clients {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := c.Wait(ctx, func(s adsclient.State) bool { return len(s.Endpoints("carts")) == 1 })
				cancel()
				if err != nil {
					t.Fatalf("client %d: the deregistered carts-2 is still served after the hold: %v", i, err)
				}
			}

			port := backend(t)
			start := time.Now()
			// Passing from the start, so this measures the bridge, not the check.
			registerHTTP(t, agent.Client(), "web", "web-3", port, "passing")
			for _, c := range clients {
				waitHealthy(t, c, "web", 3)
			}
			took := time.Since(start)
			t.Logf("hold=%v: after recovery a new instance reached both clients in %v", hold, took.Round(time.Millisecond))
			if took > 5*time.Second {
				t.Errorf("new instance took %v after recovery; want about a second", took)
			}

			downgrades := 0
			for i, r := range rec {
				for svc, n := range r.result() {
					if n < 2 && svc != "consul" {
						downgrades++
						t.Logf("hold=%v: client %d saw %s drop to %d healthy endpoints during the restart", hold, i, svc, n)
					}
				}
			}
			t.Logf("hold=%v: %d transient downgrades seen by proxies across %d services x 2 clients", hold, downgrades, len(services))
			if hold > 0 && downgrades > 0 {
				t.Errorf("with reconnect_hold=%v proxies still saw %d transient downgrades", hold, downgrades)
			}
		})
	}
}

func dialRaw(t *testing.T, h *harness, mode adsclient.Mode, on func(adsclient.Update)) *adsclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{
		Addr: h.daemon.XDSAddr().String(), NodeID: "chaos-" + mode.String(), Cluster: "chaos", Mode: mode, OnUpdate: on,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitHealthy waits until c holds at least n healthy endpoints for cluster.
func waitHealthy(t *testing.T, c *adsclient.Client, cluster string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Wait(ctx, func(s adsclient.State) bool { return healthy(s.Endpoints(cluster)) >= n }); err != nil {
		t.Fatalf("waiting for %d healthy %s endpoints: %v", n, cluster, err)
	}
}

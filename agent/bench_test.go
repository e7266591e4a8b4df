package agent_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// BenchmarkHealthFlipThroughAgent measures what the agent adds to a health
// flip's delivery: per iteration one Consul health change, timed from the
// write until a proxy connected directly to the central bridge and one
// connected through the agent (3 local proxies on its socket) hold it.
// Reported as p50/p99 for both, in the same run:
//
//	CI=true CONSUL_BIN=$PWD/.tools/bin/consul go test ./agent -run XXX -bench HealthFlip -benchtime 50x
//
// It runs once with the central bridge's adaptive debounce (the default)
// and once with a fixed 100ms window (debounce_adaptive = false), the
// baseline.
func BenchmarkHealthFlipThroughAgent(b *testing.B) {
	for _, adaptive := range []bool{true, false} {
		name := "adaptive"
		if !adaptive {
			name = "fixed-window"
		}
		b.Run(name, func(b *testing.B) { benchFlips(b, adaptive) })
	}
}

func benchFlips(b *testing.B, adaptive bool) {
	ca := consultest.Start(b)
	ca.RegisterTTL(b, "web", "web-1", 1001, nil, nil)
	ca.RegisterTTL(b, "web", "web-2", 1002, nil, nil)
	cen := startCentral(b, ca.HTTPAddr(), freeAddr(b), func(s *policy.Settings) { s.XDS.DebounceAdaptive = adaptive })
	ag := startAgent(b, b.TempDir(), cen.addr)
	sock := "unix://" + ag.SocketAddr().String()
	direct := dial(b, cen.addr, "web", adsclient.Delta)
	var relayed []*adsclient.Client
	for range 3 {
		relayed = append(relayed, dial(b, sock, "web", adsclient.Delta))
	}
	var dLat, aLat []time.Duration
	healthy := true
	b.ResetTimer()
	for range b.N {
		state, want := "critical", "127.0.0.1:1001=UNHEALTHY,127.0.0.1:1002=HEALTHY"
		if !healthy {
			state, want = "passing", "127.0.0.1:1001=HEALTHY,127.0.0.1:1002=HEALTHY"
		}
		healthy = !healthy
		start := time.Now()
		ca.SetTTL(b, "service:web-1", state)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i, c := range append([]*adsclient.Client{direct}, relayed...) {
			wg.Go(func() {
				wait(b, c, "the flip", 15*time.Second, func(s adsclient.State) bool { return health(s, "web") == want })
				d := time.Since(start)
				mu.Lock()
				if i == 0 {
					dLat = append(dLat, d)
				} else {
					aLat = append(aLat, d)
				}
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	b.StopTimer()
	pct := func(ds []time.Duration, p float64) float64 {
		slices.Sort(ds)
		return float64(ds[int(float64(len(ds)-1)*p)].Microseconds()) / 1000
	}
	b.ReportMetric(pct(dLat, 0.5), "direct-p50-ms")
	b.ReportMetric(pct(dLat, 0.99), "direct-p99-ms")
	b.ReportMetric(pct(aLat, 0.5), "agent-p50-ms")
	b.ReportMetric(pct(aLat, 0.99), "agent-p99-ms")
}

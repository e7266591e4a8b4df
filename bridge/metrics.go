package bridge

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the daemon's own Prometheus metrics; the xDS server adds its
// own to the same registry.
type metrics struct {
	consulRequests *prometheus.CounterVec
	consulErrors   *prometheus.CounterVec
	consulLatency  *prometheus.HistogramVec
	reloads        *prometheus.CounterVec
	translate      prometheus.Histogram
	changeToPush   prometheus.Histogram
	builds         prometheus.Counter
	idleGCs        prometheus.Counter
	idleReleases   prometheus.Counter
	failingGroups  prometheus.Gauge
	// skippedServices counts catalog services left out for their names.
	skippedServices prometheus.Gauge
	// queryStats is the Consul watcher's QueryStats, once it runs.
	queryStats atomic.Pointer[func() (slots, inUse, waiting int)]
	// ownSlots is the Consul watcher's OwnSlots, once it runs.
	ownSlots atomic.Pointer[func() int]
}

// newMetrics registers the daemon's metrics. notReady is /readyz's reason
// ("" when ready) and consulUp whether the local Consul is reachable; both
// are read at scrape time, so the gauges never disagree with them.
func newMetrics(reg prometheus.Registerer, notReady func() string, consulUp func() bool) *metrics {
	m := &metrics{
		consulRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "consul_xds_bridge_consul_requests_total",
			Help: "Consul HTTP requests made, by endpoint.",
		}, []string{"endpoint"}),
		consulErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "consul_xds_bridge_consul_request_errors_total",
			Help: "Consul HTTP requests that failed, by endpoint.",
		}, []string{"endpoint"}),
		consulLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "consul_xds_bridge_consul_request_seconds",
			Help: "Duration of Consul requests, blocking time included, by endpoint.",
			// Blocking queries last up to the wait time; errors and changes
			// return fast, so the buckets span both.
			Buckets: []float64{.005, .01, .05, .1, .5, 1, 5, 30, 60, 120, 300, 600},
		}, []string{"endpoint"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "consul_xds_bridge_policy_reloads_total",
			Help: "Policy loads by result (ok, failed).",
		}, []string{"result"}),
		translate: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "consul_xds_bridge_translate_seconds",
			Help:    "Time to build and translate the model.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		changeToPush: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "consul_xds_bridge_change_to_snapshot_seconds",
			Help:    "Time from a Consul blocking query returning a change to the snapshot being set (debounce included).",
			Buckets: []float64{.01, .025, .05, .1, .2, .5, 1, 2, 5},
		}),
		idleGCs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "consul_xds_bridge_idle_collections_total",
			Help: "Garbage collections the bridge started while idle (xds.collect_when_idle), so that fan-outs meet fewer.",
		}),
		idleReleases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "consul_xds_bridge_idle_memory_releases_total",
			Help: "Idle collections that also returned free memory to the OS, after a burst larger than the heap's runway (a fleet's connect, a reconnect storm).",
		}),
		builds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "consul_xds_bridge_builds_total",
			Help: "Model builds that were translated and served.",
		}),
		skippedServices: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "consul_xds_bridge_consul_services_skipped",
			Help: "Catalog services left out because Consul's API cannot query their names (see /v1/policy warnings).",
		}),
		failingGroups: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "consul_xds_bridge_proxy_groups_failing",
			Help: "Proxy groups the last build could not translate; they keep their last good listeners and routes (see /v1/policy failed_groups).",
		}),
	}
	// Both results exist from the start, so alerts on "failed" work before
	// the first failure; so do the Consul endpoints' request and error
	// counters (a fixed set: the label never carries a service name).
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("failed")
	for _, e := range consulEndpoints {
		m.consulRequests.WithLabelValues(e)
		m.consulErrors.WithLabelValues(e)
	}
	queryGauge := func(name, help string, pick func(slots, inUse, waiting int) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			f := m.queryStats.Load()
			if f == nil {
				return 0
			}
			return float64(pick((*f)()))
		})
	}
	reg.MustRegister(m.consulRequests, m.consulErrors, m.consulLatency, m.reloads, m.translate,
		m.changeToPush, m.builds, m.idleGCs, m.idleReleases, m.failingGroups, m.skippedServices,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "consul_xds_bridge_consul_up",
			Help: "1 while the local datacenter's Consul answers (it has not been silent for consul.reconnect_hold_after).",
		}, func() float64 {
			if consulUp() {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "consul_xds_bridge_ready",
			Help: "1 when /readyz answers 200.",
		}, func() float64 {
			if notReady() == "" {
				return 1
			}
			return 0
		}),
		queryGauge("consul_xds_bridge_consul_query_slots", "Consul requests the bridge allows in flight at once (consul.max_queries).",
			func(slots, _, _ int) int { return slots }),
		queryGauge("consul_xds_bridge_consul_queries_in_flight", "Consul requests in flight (each watched service holds a blocking query).",
			func(_, inUse, _ int) int { return inUse }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "consul_xds_bridge_consul_queries_own_slot",
			Help: "Watched services a connected proxy follows whose blocking query keeps a slot of its own while the others take turns (0 unless consul.max_queries is oversubscribed; see docs/scaling.md).",
		}, func() float64 {
			if f := m.ownSlots.Load(); f != nil {
				return float64((*f)())
			}
			return 0
		}),
		queryGauge("consul_xds_bridge_consul_queries_waiting", "Watches waiting for a free query slot: above 0 for long, more services are watched than consul.max_queries allows at once (see docs/scaling.md).",
			func(_, _, waiting int) int { return waiting }),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// consulEndpoints are the endpoint labels of the Consul request metrics:
// the watchers' queries (consul.WatcherConfig.OnQuery and its kin) and
// the leader check.
var consulEndpoints = []string{"catalog_services", "health_service", "health_state", "health_connect",
	"connect_ca_roots", "connect_ca_leaf", "config_entries", "gateway_services", "kv_list", "status_leader"}

func (m *metrics) consulQuery(endpoint string, err error, d time.Duration) {
	m.consulRequests.WithLabelValues(endpoint).Inc()
	m.consulLatency.WithLabelValues(endpoint).Observe(d.Seconds())
	errs := m.consulErrors.WithLabelValues(endpoint) // exists from the first request on
	if err != nil {
		errs.Inc()
	}
}

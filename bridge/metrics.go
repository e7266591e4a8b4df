package bridge

import (
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
	consulUp       prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, notReady func() string) *metrics {
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
		builds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "consul_xds_bridge_builds_total",
			Help: "Model builds that were translated and served.",
		}),
		consulUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "consul_xds_bridge_consul_up",
			Help: "1 when the last Consul request succeeded.",
		}),
	}
	// Both results exist from the start, so alerts on "failed" work before
	// the first failure.
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("failed")
	reg.MustRegister(m.consulRequests, m.consulErrors, m.consulLatency, m.reloads, m.translate,
		m.changeToPush, m.builds, m.consulUp,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "consul_xds_bridge_ready",
			Help: "1 when /readyz answers 200.",
		}, func() float64 {
			if notReady() == "" {
				return 1
			}
			return 0
		}),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) consulQuery(endpoint string, err error, d time.Duration) {
	m.consulRequests.WithLabelValues(endpoint).Inc()
	m.consulLatency.WithLabelValues(endpoint).Observe(d.Seconds())
	if err != nil {
		m.consulErrors.WithLabelValues(endpoint).Inc()
		m.consulUp.Set(0)
		return
	}
	m.consulUp.Set(1)
}

package serve

import (
	"errors"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// metrics are the xDS side's Prometheus metrics.
//
// Cardinality: the group label is node.cluster as proxies announce it, so
// it is bounded by the proxy groups actually deployed (not by proxies);
// a client can still make up values, which only costs series while its
// stream is open, as a group's series is deleted with its last stream. kind has at most 10 values (ADS, per-type, x delta) and
// type is the short name of a type the bridge serves (CDS, EDS, LDS, RDS, SDS),
// as only responses we sent are counted.
type metrics struct {
	connected     *prometheus.GaugeVec
	pushes        *prometheus.CounterVec
	acks          *prometheus.CounterVec
	nacks         *prometheus.CounterVec
	resources     *prometheus.GaugeVec
	updateSeconds prometheus.Histogram
	fanout        prometheus.Histogram
	// admission control (admission.go)
	admissionWaiting prometheus.Gauge
	admissionSyncing prometheus.Gauge
	// stagingTimeouts counts make-before-break steps that went on
	// without every proxy's answer (staging.go).
	stagingTimeouts prometheus.Counter
	// refused counts requests beyond a bound (tracker.go), whose stream
	// was ended.
	refused prometheus.Counter
	// idleClosed counts streams closed for sending no first request.
	idleClosed prometheus.Counter
	// sendsBlocked counts send workers left to a blocked send
	// (sendpool.go).
	sendsBlocked prometheus.Counter

	mu        sync.Mutex
	connCount map[[2]string]int // group, kind -> open streams
	// byType is cache.TypeOrder's counters by type URL (counted); read only.
	byType map[string]*typeCounters
}

func newMetrics(reg prometheus.Registerer, log zerolog.Logger) *metrics {
	m := &metrics{
		connCount: map[[2]string]int{},
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "consul_xds_bridge_connected_proxies",
			Help: "xDS streams open, by proxy group (node.cluster) and stream kind (ADS, ADS delta, CDS, ...). Counted from a stream's first request.",
		}, []string{"group", "kind"}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "consul_xds_bridge_pushes_total",
			Help: "xDS responses sent, by resource type.",
		}, []string{"type"}),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "consul_xds_bridge_acks_total",
			Help: "xDS responses ACKed by proxies, by resource type.",
		}, []string{"type"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "consul_xds_bridge_nacks_total",
			Help: "xDS responses rejected (NACKed) by proxies, by resource type.",
		}, []string{"type"}),
		resources: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "consul_xds_bridge_snapshot_resources",
			Help: "Resources in the served snapshot by type: clusters and endpoints shared by all proxies; listeners and routes of the largest proxy group.",
		}, []string{"type"}),
		updateSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "consul_xds_bridge_snapshot_update_seconds",
			Help:    "Time spent installing a translation into the serving cache (marshalling and hashing changed resources, consistency checks, answering waiting watches) for every node.cluster.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10), // 0.5ms .. ~131s
		}),
		fanout: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "consul_xds_bridge_push_fanout_seconds",
			Help:    "Per update of a node.cluster's resources (each step of a make-before-break change is one): time from answering its proxies' waiting watches to the last of those answers, and of the answers to proxies still acknowledging the update before, handed to gRPC (or dropped with its stream). The server's share of a change's latency; a stuck proxy holds its update open.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5ms .. ~16s
		}),
		admissionWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "consul_xds_bridge_initial_syncs_waiting",
			Help: "New xDS streams waiting for an initial-sync slot (xds.max_initial_syncs).",
		}),
		admissionSyncing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "consul_xds_bridge_initial_syncs_in_progress",
			Help: "xDS streams holding an initial-sync slot: connected, full state not yet acknowledged.",
		}),
		stagingTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "consul_xds_bridge_make_before_break_timeouts_total",
			Help: "Updates whose new clusters or routes were pushed on before every proxy of the node.cluster acknowledged the previous step within the step timeout (5s).",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "consul_xds_bridge_refused_requests_total",
			Help: "xDS requests refused for breaking a bound (node size, type URLs, a node changing within a stream); their streams were ended.",
		}),
	}
	m.connected = register(reg, log, m.connected)
	m.refused = register(reg, log, m.refused)
	m.idleClosed = register(reg, log, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "consul_xds_bridge_idle_streams_closed_total",
		Help: "xDS streams closed because they sent no request within 30s of opening.",
	}))
	m.sendsBlocked = register(reg, log, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "consul_xds_bridge_blocked_sends_total",
		Help: "Sends of an update that took 50ms or more (a proxy that does not read, or a core too busy to run the send): the send pool's worker was left to it and another took its place.",
	}))
	m.stagingTimeouts = register(reg, log, m.stagingTimeouts)
	m.admissionWaiting = register(reg, log, m.admissionWaiting)
	m.admissionSyncing = register(reg, log, m.admissionSyncing)
	m.pushes = register(reg, log, m.pushes)
	m.acks = register(reg, log, m.acks)
	m.nacks = register(reg, log, m.nacks)
	m.resources = register(reg, log, m.resources)
	m.updateSeconds = register(reg, log, m.updateSeconds)
	m.fanout = register(reg, log, m.fanout)
	// Known types start at zero, so rate() works from the first push,
	// and their counters are resolved once (counted below).
	m.byType = map[string]*typeCounters{}
	for _, typ := range cache.TypeOrder {
		t := shortType(typ)
		m.byType[typ] = &typeCounters{pushes: m.pushes.WithLabelValues(t), acks: m.acks.WithLabelValues(t), nacks: m.nacks.WithLabelValues(t)}
	}
	return m
}

// typeCounters are one type's pushes, ACKs and NACKs. They are counted
// twice per proxy per change, and WithLabelValues hashes and looks up its
// label on every call.
type typeCounters struct{ pushes, acks, nacks prometheus.Counter }

// counted is typeURL's counters: resolved once for the types the bridge
// serves, looked up per call for any other a client names.
func (m *metrics) counted(typeURL string) typeCounters {
	if c, ok := m.byType[typeURL]; ok {
		return *c
	}
	t := metricType(typeURL)
	return typeCounters{pushes: m.pushes.WithLabelValues(t), acks: m.acks.WithLabelValues(t), nacks: m.nacks.WithLabelValues(t)}
}

// register registers c, or reuses the collector already registered under
// the same description (two Servers sharing a registry).
func register[C prometheus.Collector](reg prometheus.Registerer, log zerolog.Logger, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	log.Error().Err(err).Msg("cannot register metric")
	return c
}

// SidecarsMetricGroup is the group label under which connected_proxies
// counts every Connect sidecar (each is a group of its own).
const SidecarsMetricGroup = ir.SidecarGroupPrefix + "*"

// streamCounted adds (+1) or removes (-1) a stream from
// connected_proxies. A group's series is deleted with its last stream, so
// the label set stays bounded by the groups connected right now.
func (m *metrics) streamCounted(group, kind string, delta int) {
	if strings.HasPrefix(group, ir.SidecarGroupPrefix) {
		// One group per registered sidecar would be one series per
		// proxy: Connect sidecars are counted together.
		group = SidecarsMetricGroup
	}
	group = groupLabel(group)
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{group, kind}
	n := m.connCount[k] + delta
	if n <= 0 {
		delete(m.connCount, k)
		m.connected.DeleteLabelValues(group, kind)
		return
	}
	m.connCount[k] = n
	m.connected.WithLabelValues(group, kind).Set(float64(n))
}

// maxGroupLabel bounds the group label: it is the node.cluster a client
// announces (up to the node's size limit), shown on the unauthenticated
// /metrics, where a few clients could otherwise make every scrape carry
// megabytes. Policy group names are far shorter.
const maxGroupLabel = 128

// groupLabel is node.cluster as the group label: itself, or cut at
// maxGroupLabel with a marker (the same cut for a stream's +1 and -1).
func groupLabel(group string) string {
	const cut = "…(cut)"
	if len(group) <= maxGroupLabel {
		return group
	}
	g := group[:maxGroupLabel-len(cut)]
	for !utf8.ValidString(g) { // never split a character
		g = g[:len(g)-1]
	}
	return g + cut
}

// metricType is the type label of a type URL: its short name for the
// types the bridge serves, "other" for anything else.
func metricType(typeURL string) string {
	if s, ok := shortTypes[typeURL]; ok {
		return s
	}
	return "other"
}

// setResources records the size of a translation.
func (m *metrics) setResources(out *xds.Output) {
	if out == nil {
		return
	}
	var listeners, routes, groupSecrets int
	for _, g := range out.Groups {
		if g == nil {
			continue
		}
		listeners = max(listeners, len(g.Listeners))
		routes = max(routes, len(g.Routes))
		groupSecrets = max(groupSecrets, len(g.Secrets))
	}
	var clusters, endpoints, secrets int
	if out.Shared != nil {
		clusters, endpoints, secrets = len(out.Shared.Clusters), len(out.Shared.Endpoints), len(out.Shared.Secrets)
	}
	m.resources.WithLabelValues("SDS").Set(float64(secrets + groupSecrets))
	m.resources.WithLabelValues("CDS").Set(float64(clusters))
	m.resources.WithLabelValues("EDS").Set(float64(endpoints))
	m.resources.WithLabelValues("LDS").Set(float64(listeners))
	m.resources.WithLabelValues("RDS").Set(float64(routes))
}

package agent

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// envoys are the agent's Envoy runners by block name; envoyWG tracks
// their goroutines (Run waits for their drain).
type envoys struct {
	mu      sync.Mutex
	runners map[string]*envoyRunner
	cancels map[string]context.CancelFunc
	wg      sync.WaitGroup
	closed  bool // Run is ending: no runner is started any more

	restarts    *prometheus.CounterVec
	ready       *prometheus.GaugeVec
	statsErrors *prometheus.CounterVec
}

func newEnvoys(reg prometheus.Registerer) *envoys {
	e := &envoys{
		runners: map[string]*envoyRunner{}, cancels: map[string]context.CancelFunc{},
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "consul_xds_bridge_agent_envoy_restarts_total",
			Help: "Local Envoys (envoy blocks) that exited and were restarted by the agent."}, []string{"envoy"}),
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "consul_xds_bridge_agent_envoy_ready",
			Help: "1 while a local Envoy's /ready says LIVE and it has ACKed its first config."}, []string{"envoy"}),
		statsErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "consul_xds_bridge_agent_envoy_stats_errors_total",
			Help: "Reads of a local Envoy's /stats/prometheus for /metrics that failed (no answer, too large, unparsable)."}, []string{"envoy"}),
	}
	reg.MustRegister(e.restarts, e.ready, e.statsErrors)
	return e
}

// startEnvoys starts a runner per envoy block (from Run, once listening).
func (a *Agent) startEnvoys() {
	a.ReloadEnvoys(a.cfg.Envoys)
}

// ReloadEnvoys applies the envoy blocks of a re-read configuration
// (SIGHUP): a changed block, or a block whose binary changed on disk,
// hot-restarts its Envoy; a new block starts one; a removed block's
// Envoy is drained and stopped. It does nothing before Run has started
// (Started) or after it ended.
func (a *Agent) ReloadEnvoys(cfgs []EnvoyConfig) {
	e := a.envoys
	e.mu.Lock()
	defer e.mu.Unlock()
	ctx := a.ctx
	if ctx == nil || e.closed {
		return
	}
	keep := map[string]bool{}
	for _, cfg := range cfgs {
		keep[cfg.Name] = true
		if r := e.runners[cfg.Name]; r != nil {
			r.offer(cfg)
			continue
		}
		r := newEnvoyRunner(a, cfg)
		rctx, cancel := context.WithCancel(ctx)
		e.runners[cfg.Name], e.cancels[cfg.Name] = r, cancel
		e.wg.Add(1)
		go func() { defer e.wg.Done(); r.run(rctx) }()
	}
	for name, r := range e.runners {
		if !keep[name] {
			a.log.Info().Str("envoy", name).Msg("envoy block removed; draining and stopping its Envoy")
			e.cancels[name]()
			delete(e.runners, name)
			delete(e.cancels, name)
			r.removed = true
		}
	}
}

// envoyStatuses are the Envoys' statuses, by name.
func (a *Agent) envoyStatuses() []EnvoyStatus {
	e := a.envoys
	e.mu.Lock()
	runners := make([]*envoyRunner, 0, len(e.runners))
	for _, r := range e.runners {
		runners = append(runners, r)
	}
	e.mu.Unlock()
	out := make([]EnvoyStatus, 0, len(runners))
	for _, r := range runners {
		out = append(out, r.status())
	}
	slices.SortFunc(out, func(x, y EnvoyStatus) int { return strings.Compare(x.Name, y.Name) })
	return out
}

func (a *Agent) envoyRunners() []*envoyRunner {
	e := a.envoys
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*envoyRunner, 0, len(e.runners))
	for _, r := range e.runners {
		out = append(out, r)
	}
	slices.SortFunc(out, func(x, y *envoyRunner) int { return strings.Compare(x.name, y.name) })
	return out
}

// envoyReadiness is the first Envoy that is not ready, as /readyz says it.
func envoyReadiness(sts []EnvoyStatus) (int, string) {
	for _, s := range sts {
		if !s.Ready {
			why := s.Reason
			if why == "" {
				why = "not LIVE and ACKed yet"
			}
			return 503, "envoy " + s.Name + " is not ready: " + why
		}
	}
	return 200, ""
}

// The labels the agent puts on each Envoy's merged stats: which block,
// node.id and node.cluster (the group) they come from. Envoy's own labels
// start with envoy_, so these never collide with them; if they did, the
// agent's win.
const (
	labelEnvoy   = "envoy"
	labelNodeID  = "node_id"
	labelGroup   = "group"
	envoyFamilyP = "envoy_"
)

// metricsHandler serves the agent's metrics merged with every running
// Envoy's /stats/prometheus (as Istio merges application and Envoy
// metrics). Only families named envoy_* are taken: whatever answers on an
// Envoy's admin port cannot add or shadow the agent's own metrics. Only
// /stats/prometheus is read (no config dump: no certificates, keys or
// tokens), with a size bound and a timeout; a failed read is counted and
// leaves that Envoy out of this scrape.
func (a *Agent) metricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// Envoys first, so the agent's own metrics (gathered after) count
		// this scrape's failures.
		fromEnvoys := map[string]*dto.MetricFamily{}
		for _, r := range a.envoyRunners() {
			st := r.status()
			r.mu.Lock()
			cfg := r.cfg
			r.mu.Unlock()
			if st.PID == 0 {
				continue
			}
			code, body, err := adminGet(req.Context(), cfg, "/stats/prometheus", maxEnvoyStats)
			var mfs map[string]*dto.MetricFamily
			if err == nil && code == http.StatusOK {
				p := expfmt.NewTextParser(model.UTF8Validation)
				mfs, err = p.TextToMetricFamilies(bytes.NewReader(body))
			}
			if err != nil || code != http.StatusOK {
				a.envoys.statsErrors.WithLabelValues(cfg.Name).Inc()
				continue
			}
			ours := []*dto.LabelPair{label(labelEnvoy, cfg.Name), label(labelGroup, st.NodeCluster), label(labelNodeID, st.NodeID)}
			for name, mf := range mfs {
				if !strings.HasPrefix(name, envoyFamilyP) {
					continue
				}
				for _, m := range mf.Metric {
					m.Label = slices.DeleteFunc(m.Label, func(l *dto.LabelPair) bool {
						return l.GetName() == labelEnvoy || l.GetName() == labelNodeID || l.GetName() == labelGroup
					})
					m.Label = append(m.Label, ours...)
					sort.Slice(m.Label, func(i, j int) bool { return m.Label[i].GetName() < m.Label[j].GetName() })
				}
				if ex := fromEnvoys[name]; ex != nil {
					if ex.GetType() == mf.GetType() {
						ex.Metric = append(ex.Metric, mf.Metric...)
					}
					continue
				}
				fromEnvoys[name] = mf
			}
		}
		fams, err := a.reg.Gather()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		merged := fromEnvoys
		for _, f := range fams {
			merged[f.GetName()] = f // never envoy_*: the agent's names start with consul_xds_bridge_
		}
		format := expfmt.NewFormat(expfmt.TypeTextPlain)
		w.Header().Set("Content-Type", string(format))
		enc := expfmt.NewEncoder(w, format)
		names := make([]string, 0, len(merged))
		for n := range merged {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if err := enc.Encode(merged[n]); err != nil {
				return
			}
		}
	})
}

func label(name, value string) *dto.LabelPair { return &dto.LabelPair{Name: &name, Value: &value} }

// wait ends the runners' starts and waits until every Envoy is stopped.
func (e *envoys) wait() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.wg.Wait()
}

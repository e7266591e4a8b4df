package serve

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Totals are the server's running counts the console's activity history
// samples every 2 s.
type Totals struct {
	NACKs, Pushes float64
	// Fanouts and FanoutSeconds are the count and sum of
	// consul_xds_bridge_push_fanout_seconds.
	Fanouts, FanoutSeconds float64
}

// Totals reads them from the server's own collectors. Gathering the
// registry instead also ran the process and Go runtime collectors (it
// reads /proc and every runtime metric): about 1 ms each sample, which
// was most of an idle bridge's CPU at small fleets.
func (s *Server) Totals() Totals {
	m := s.metrics
	t := Totals{NACKs: sumCounters(m.nacks), Pushes: sumCounters(m.pushes)}
	var d dto.Metric
	if err := m.fanout.Write(&d); err == nil {
		t.Fanouts = float64(d.GetHistogram().GetSampleCount())
		t.FanoutSeconds = d.GetHistogram().GetSampleSum()
	}
	return t
}

// sumCounters adds up every counter c collects (each label's).
func sumCounters(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	var n float64
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) == nil {
			n += d.GetCounter().GetValue()
		}
	}
	return n
}

package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// meter measures the server and the fleet over one scenario.
type meter struct {
	r     *run
	s0    Sample // of r.t
	all0  []Sample
	b0    int64
	req0  []float64
	cons0 float64
	gen0  float64 // the load generator's own CPU
	steal []time.Duration
}

func (r *run) meter() *meter {
	m := &meter{r: r, gen0: r.genCPU(), steal: CPUSteal()}
	for _, t := range r.targets() {
		ResetPeak(t.PID)
		m.all0 = append(m.all0, SampleProc(t.PID))
		m.req0 = append(m.req0, t.ConsulRequests())
	}
	m.s0 = m.all0[0]
	if r.f != nil {
		m.b0 = r.f.TotalBytes()
	}
	if r.t.Name != "peer" {
		m.cons0 = ProcCPU(r.consul.PID())
	}
	return m
}

func (m *meter) row(scenario string, lats []time.Duration, max time.Duration) Row {
	row := Row{
		Scenario: scenario, Server: m.r.t.Name, Mode: m.r.mode, N: m.r.n,
		P50: -1, P99: -1, Max: max, ConsulReqs: -1,
		steal: stealNote(m.steal, CPUSteal()),
	}
	var each []string
	for i, t := range m.r.targets() {
		s1 := SampleProc(t.PID)
		cpu := s1.CPU - m.all0[i].CPU
		row.CPU += cpu
		row.PeakRSS += s1.Peak
		reqs := -1.0
		if m.req0[i] >= 0 {
			if v := t.ConsulRequests(); v >= 0 {
				reqs = v - m.req0[i]
				row.ConsulReqs = max0(row.ConsulReqs) + reqs
			}
		}
		each = append(each, fmt.Sprintf("replica %c: CPU %.2fs, peak RSS %s, Consul reqs %s", 'A'+i, cpu, bytesStr(float64(s1.Peak)), reqs2(reqs)))
	}
	if len(each) > 1 {
		row.perReplica = strings.Join(each, "; ")
	}
	if m.r.f != nil {
		row.Bytes = m.r.f.TotalBytes() - m.b0
	}
	if len(lats) > 0 {
		row.P50, row.P99 = percentile(lats, 50), percentile(lats, 99)
		row.Max = max
		if row.Max <= 0 {
			row.Max = slices.Max(lats)
		}
	}
	return row
}

func max0(v float64) float64 { return math.Max(v, 0) }

func reqs2(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f", v)
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return -1
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

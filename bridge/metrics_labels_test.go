package bridge

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestConsulMetricLabelsPreinitialised: the Consul request and error
// counters of every endpoint exist (at 0) before the first request, so
// an alert on errors/requests works from the start; and the endpoint
// labels are exactly the fixed set the consul package reports (bounded:
// no service name, no key).
func TestConsulMetricLabelsPreinitialised(t *testing.T) {
	reg := prometheus.NewRegistry()
	newMetrics(reg, func() string { return "" }, func() bool { return true })
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string][]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "endpoint" {
					series[mf.GetName()] = append(series[mf.GetName()], l.GetValue())
				}
			}
		}
	}
	for _, name := range []string{"consul_xds_bridge_consul_requests_total", "consul_xds_bridge_consul_request_errors_total"} {
		got := series[name]
		slices.Sort(got)
		want := slices.Sorted(slices.Values(consulEndpoints))
		if !slices.Equal(got, want) {
			t.Errorf("%s endpoints before any request = %q, want %q", name, got, want)
		}
	}

	// Every endpoint label the watchers use is in the list.
	files, _ := filepath.Glob("../consul/*.go")
	re := regexp.MustCompile(`(?:result|resultFunc|queryResult|OnQuery)\("([a-z_]+)"`)
	used := map[string]bool{"status_leader": true}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			used[string(m[1])] = true
		}
	}
	for e := range used {
		if !slices.Contains(consulEndpoints, e) {
			t.Errorf("the consul package reports endpoint %q, which consulEndpoints lacks", e)
		}
	}
	if len(used) != len(consulEndpoints) {
		t.Errorf("consulEndpoints %q, used %v", consulEndpoints, used)
	}
}

// TestConsulErrorSeriesFollowsRequests: an endpoint outside the list (a
// new watcher) still gets its error series with its first request.
func TestConsulErrorSeriesFollowsRequests(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, func() string { return "" }, func() bool { return true })
	m.consulQuery("new_endpoint", nil, 0)
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "consul_xds_bridge_consul_request_errors_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			if s.GetLabel()[0].GetValue() == "new_endpoint" && s.GetCounter().GetValue() == 0 {
				return
			}
		}
	}
	t.Error("no 0 error series for new_endpoint after its first successful request")
}

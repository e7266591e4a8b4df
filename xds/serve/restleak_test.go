package serve

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
)

// TestRESTPollsLeaveNothing: a REST poll leaves no state behind (rest-
// xds.md), whoever sends it: no port, token or certificate is needed on
// the default plaintext port, and each poll may name a node.cluster of
// its own. An older Envoy's version made each poll's key stay in the
// downgrade notes for good (only a gRPC stream's end forgot a key): 300
// polls of 60 KB clusters held ~18 MB, unbounded with more.
func TestRESTPollsLeaveNothing(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.update(t, testOutput(t, []string{"a", "b"}, 8080))
	hc := &http.Client{Timeout: 5 * time.Second}
	pad := strings.Repeat("x", 60000)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 300 {
		body := fmt.Sprintf(`{"node":{"id":"x","cluster":"c%d-%s","user_agent_name":"envoy","user_agent_build_version":{"version":{"major_number":1,"minor_number":10}}}}`, i, pad)
		resp, err := hc.Post("http://"+s.addr+"/v3/discovery:clusters", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("poll %d: %s", i, resp.Status)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	s.mu.Lock()
	kept := len(s.downgraded)
	s.mu.Unlock()
	if kept != 0 {
		t.Errorf("%d keys of REST polls kept in the downgrade notes; a poll must leave nothing", kept)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 8<<20 {
		t.Errorf("the heap grew %.1f MiB over 300 polls; a poll must leave nothing", float64(grew)/(1<<20))
	}
}

// TestGroupLabelBounded: connected_proxies' group label is the
// node.cluster a client announces, on the unauthenticated /metrics; a
// long one is cut (at a character boundary), so a client cannot make
// every scrape carry its 64 KiB, and its stream's end removes the series.
func TestGroupLabelBounded(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry(), zerolog.Nop())
	long := strings.Repeat("é", 40000) // 80 KB of two-byte characters
	m.streamCounted(long, "ADS delta", +1)
	var labels []string
	ch := make(chan prometheus.Metric, 4)
	m.connected.Collect(ch)
	close(ch)
	for pm := range ch {
		var d dto.Metric
		_ = pm.Write(&d)
		for _, l := range d.GetLabel() {
			if l.GetName() == "group" {
				labels = append(labels, l.GetValue())
			}
		}
	}
	if len(labels) != 1 || len(labels[0]) > maxGroupLabel || !utf8.ValidString(labels[0]) || !strings.HasSuffix(labels[0], "…(cut)") {
		t.Fatalf("group labels %d, first %d bytes: want one, cut to ≤ %d bytes", len(labels), len(labels[0]), maxGroupLabel)
	}
	m.streamCounted(long, "ADS delta", -1)
	if n := testutil.CollectAndCount(m.connected); n != 0 {
		t.Errorf("%d series after the stream ended", n)
	}
}

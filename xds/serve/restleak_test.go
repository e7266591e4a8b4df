package serve

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
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

package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

func TestPrintProxies(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	proxies := []serve.ProxyStatus{
		{
			NodeID: "edge-1", NodeCluster: "edge", Group: "edge", Kind: "ADS", Status: serve.StatusSynced,
			UserAgent: "envoy/1.31.0", ConnectedSince: now.Add(-90 * time.Second),
			Types: map[string]*serve.TypeStatus{"CDS": {Status: serve.StatusSynced, VersionAcked: "0123456789abcdef"}},
		},
		{
			NodeID: "edge-2", NodeCluster: "edge", Group: "edge", Kind: "ADS delta", Status: serve.StatusNACKed,
			ConnectedSince: now.Add(-time.Hour), GroupError: `proxy group "edge": listener fails validation`,
			Types: map[string]*serve.TypeStatus{"LDS": {Status: serve.StatusNACKed, VersionSent: "feedbeef00", VersionAcked: "aaaabbbb",
				LastNACK: &serve.NACKInfo{Version: "feedbeef00", Error: "Error adding/updating listener(s) edge.http: unknown filter"}}},
		},
	}
	var out bytes.Buffer
	printProxies(&out, proxies, now)
	got := out.String()
	for _, want := range []string{
		"NODE", "edge-1", "SYNCED 01234567", "envoy/1.31.0", "1m30s",
		"edge-2", "ADS delta", "NACKED aaaabbbb",
		"edge-2 LDS NACKed version feedbeef00: Error adding/updating listener(s) edge.http: unknown filter",
		`edge-2 group edge kept at its last good state: proxy group "edge": listener fails validation`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("status table lacks %q:\n%s", want, got)
		}
	}
	if lines := strings.Split(strings.TrimSpace(got), "\n"); !strings.HasPrefix(lines[1], "edge-1") {
		t.Errorf("rows out of order:\n%s", got)
	}
}

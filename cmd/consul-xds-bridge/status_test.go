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
			UserAgent: "envoy/1.31.0", EnvoyVersion: "1.31", ConnectedSince: now.Add(-90 * time.Second),
			Types: map[string]*serve.TypeStatus{"CDS": {Status: serve.StatusSynced, VersionAcked: "0123456789abcdef"}},
		},
		{
			NodeID: "edge-2", NodeCluster: "edge", Group: "edge", Kind: "ADS delta", Status: serve.StatusNACKed,
			ConnectedSince: now.Add(-time.Hour), GroupError: `proxy group "edge": listener fails validation`,
			EnvoyVersion: "1.22", Downgraded: []string{"per-client local rate limit left out", "zstd left out"},
			RelayedEnvoys: []string{"web-sidecar-proxy@1.22"},
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
		"edge-2 runs Envoy 1.22, served differently from the newest: per-client local rate limit left out; zstd left out",
		"edge-2 relays to: web-sidecar-proxy@1.22",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("status table lacks %q:\n%s", want, got)
		}
	}
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if !strings.HasPrefix(lines[1], "edge-1") {
		t.Errorf("rows out of order:\n%s", got)
	}
	if !strings.Contains(lines[0], "ENVOY") || !strings.Contains(lines[1], " 1.31 ") || !strings.Contains(lines[2], " 1.22 ") {
		t.Errorf("no ENVOY column with each node's version:\n%s", got)
	}
}

// TestPrintProxiesEscapesControlCharacters: node ids, user agents, NACK
// texts and relayed Envoys are what clients say of themselves; a hostile
// one cannot write terminal escape sequences through status.
func TestPrintProxiesEscapesControlCharacters(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	evil := "\x1b]0;owned\x07\x1b[2J\r"
	proxies := []serve.ProxyStatus{{
		NodeID: "n" + evil, NodeCluster: "c" + evil, UserAgent: "envoy" + evil, Kind: "ADS", Status: serve.StatusNACKed, ConnectedSince: now,
		Types:        map[string]*serve.TypeStatus{"LDS": {Status: serve.StatusNACKed, LastNACK: &serve.NACKInfo{Version: "1", Error: "bad" + evil}}},
		EnvoyVersion: "1.22", Downgraded: []string{"x"}, RelayedEnvoys: []string{"r" + evil + "@1.22"},
	}}
	var out bytes.Buffer
	printProxies(&out, proxies, now)
	got := out.String()
	if strings.ContainsAny(got, "\x1b\x07\r") {
		t.Fatalf("control characters reached the terminal: %q", got)
	}
	if !strings.Contains(got, `n\x1b]0;owned\a\x1b[2J\r`) || !strings.Contains(got, `bad\x1b`) || !strings.Contains(got, `r\x1b`) {
		t.Errorf("escaped forms missing:\n%s", got)
	}
}

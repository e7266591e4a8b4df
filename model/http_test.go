package model_test

import (
	"slices"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// A service an HTTP filter calls (an access-log collector) is watched
// and becomes an HTTP/2 cluster, though no route names it.
func TestCollectorIsWatchedAndAnHTTP2Cluster(t *testing.T) {
	doc, diags := policy.Parse("p.hcl", []byte(`
proxy "edge" {
  listener "http" {
    port = 8080
    access_log {
      collector = "otel-collector"
    }
    virtual_host "all" {
      route {
        service = "web"
      }
    }
  }
}
`))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	cfg, diags := policy.Merge(doc)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	targets := model.WatchTargets(cfg.Policy)
	if !slices.Contains(targets.Services, consul.ServiceKey{Name: "otel-collector"}) {
		t.Errorf("watch targets %v lack the collector", targets.Services)
	}
	m, _ := model.Build(&consul.Catalog{}, cfg.Policy)
	c := m.Cluster("otel-collector")
	if c == nil || !c.HTTP2 {
		t.Fatalf("collector cluster = %+v, want an HTTP/2 cluster", c)
	}
	if got := cfg.Policy.Proxies[0].Listeners[0].FilterServices(); !slices.Equal(got, []string{"otel-collector"}) {
		t.Errorf("FilterServices = %v", got)
	}
}

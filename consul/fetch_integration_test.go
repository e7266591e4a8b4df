package consul_test

import (
	"context"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

// TestFetchCatalogSkipsWhatTheWatcherSkips: plan's one-shot read of the
// catalog leaves out the services the watcher leaves out (names that
// cannot be queried or be cluster names): with "a+shop" read, plan showed
// routes moving to it that the bridge never serves.
func TestFetchCatalogSkipsWhatTheWatcherSkips(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "shop", "shop-1", 1001, nil, nil)
	agent.RegisterTTL(t, "a+shop", "a-shop-1", 1002, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cat, err := consul.FetchCatalog(ctx, agent.Client(), consul.Targets{AllLocal: true}, consul.QueryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range cat.Services {
		names = append(names, s.Name)
	}
	for _, n := range names {
		if n == "a+shop" {
			t.Errorf("plan's catalog has %q, which the watcher skips: %v", n, names)
		}
	}
	found := false
	for _, n := range names {
		found = found || n == "shop"
	}
	if !found {
		t.Errorf("plan's catalog lacks shop: %v", names)
	}
}

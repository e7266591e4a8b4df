package consul

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/hashicorp/consul/api"
)

// A terminating gateway linked with the wildcard (Name "*": every service
// of the namespace) is expanded by Consul itself: its catalog links every
// service of the namespace, explicit links winning with their own TLS
// files, and its xDS server serves what /v1/catalog/gateway-services/NAME
// answers. The config-entry watcher (and FetchMesh) read that answer for
// each terminating-gateway entry with a wildcard and hand the entry on
// with its links replaced by Consul's expansion, so the bridge serves
// exactly the services Consul does. Until the answer is read, the entry
// keeps its wildcard, which the model warns about and skips.

// wildcardGateways are the names of the terminating-gateway entries among
// entries that link the wildcard, sorted.
func wildcardGateways(entries []api.ConfigEntry) []string {
	var out []string
	for _, e := range entries {
		tg, ok := e.(*api.TerminatingGatewayConfigEntry)
		if ok && tg != nil && slices.ContainsFunc(tg.Services, func(s api.LinkedService) bool { return s.Name == "*" }) {
			out = append(out, tg.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// expandWildcards returns entries with each wildcard terminating-gateway
// entry whose expansion links holds replaced by a copy linking what Consul
// expanded it to; entries themselves are not modified.
func expandWildcards(entries []api.ConfigEntry, links map[string][]*api.GatewayService) []api.ConfigEntry {
	if len(links) == 0 {
		return entries
	}
	out := slices.Clone(entries)
	for i, e := range out {
		tg, ok := e.(*api.TerminatingGatewayConfigEntry)
		if !ok || tg == nil {
			continue
		}
		gs, read := links[tg.Name]
		if !read || !slices.ContainsFunc(tg.Services, func(s api.LinkedService) bool { return s.Name == "*" }) {
			continue
		}
		expanded := *tg
		expanded.Services = nil
		for _, g := range gs {
			if g == nil || g.GatewayKind != api.ServiceKindTerminatingGateway {
				continue
			}
			expanded.Services = append(expanded.Services, api.LinkedService{
				Name: g.Service.Name, CAFile: g.CAFile, CertFile: g.CertFile, KeyFile: g.KeyFile, SNI: g.SNI,
			})
		}
		out[i] = &expanded
	}
	return out
}

// gatewayServicesView follows Consul's expansion of gateway's links.
func (w *ConfigEntriesWatcher) gatewayServicesView(gateway string) view[[]*api.GatewayService] {
	v := view[[]*api.GatewayService]{
		id: "gateway-services(" + gateway + ")",
		fetch: func(q *api.QueryOptions) ([]*api.GatewayService, *api.QueryMeta, error) {
			return w.cfg.Client.Catalog().GatewayServices(gateway, q)
		},
		equal: sameGatewayServices,
		opts:  w.cfg.Query,
		log:   w.cfg.Logger,
	}
	if w.cfg.OnQuery != nil {
		v.result = func(err error, d time.Duration) { w.cfg.OnQuery("gateway_services", "", err, d) }
	}
	return v
}

func sameGatewayServices(a, b []*api.GatewayService) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// fetchWildcards expands the wildcard links of entries once (FetchMesh). A
// gateway whose expansion cannot be read keeps its wildcard, as in the
// daemon while it retries.
func fetchWildcards(ctx context.Context, client *api.Client, entries []api.ConfigEntry, q *api.QueryOptions) []api.ConfigEntry {
	links := map[string][]*api.GatewayService{}
	for _, name := range wildcardGateways(entries) {
		if gs, _, err := client.Catalog().GatewayServices(name, q.WithContext(ctx)); err == nil {
			links[name] = gs
		}
	}
	return expandWildcards(entries, links)
}

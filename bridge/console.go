package bridge

import (
	"embed"
	"io/fs"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// The console is plain HTML, CSS and JavaScript: no build step and no CDN,
// so the binary alone serves it, also on hosts without Internet access.
//
//go:embed ui
var uiFiles embed.FS

// planBase is what the last good build used: the catalog and the active
// policy's documents (so a plan replaces one document and builds against
// the very catalog being served), and the model (for "used by").
type planBase struct {
	catalog *consul.Catalog
	docs    []*policy.Document
	policy  *policy.Policy
	model   *ir.Model
}

// consoleHandler serves the console's static files under /ui/. They hold
// no data: every figure comes from the /v1 endpoints, which the page calls
// with the bearer token, so the files are served without one (a browser
// cannot send a header when it follows a link).
func consoleHandler() http.Handler {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The page is a single document whose views are selected by the
		// URL fragment; caching is off so an upgraded bridge never runs
		// an old script against new endpoints.
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		files.ServeHTTP(w, r)
	})
}

// isConsolePath says whether an admin request is for the console's
// static files, which adminAuth lets through without a token.
func isConsolePath(p string) bool {
	return p == "/" || p == "/ui" || strings.HasPrefix(p, "/ui/")
}

// ServiceUsage says which clusters are made of a Consul service and which
// proxy groups route to them, for the console's catalog page.
type ServiceUsage struct {
	Clusters []string `json:"clusters"`
	// Groups are the proxy groups with a route, split, mirror or TCP
	// listener to one of Clusters; "(proxyless gRPC)" for the API
	// listeners of proxyless clients.
	Groups []string `json:"groups,omitempty"`
	// Endpoints is what EDS tells proxies of each cluster's endpoints
	// ("ADDRESS:PORT" -> health and weight), beside Consul's checks: the
	// two differ on purpose (a warning check is HEALTHY, maintenance is
	// DRAINING), and the console shows both.
	Endpoints map[string]map[string]EndpointState `json:"endpoints,omitempty"`
	// Starved lists the clusters some route sends traffic to while none
	// of their endpoints is healthy (a subset whose instances all fail):
	// those requests get 503s.
	Starved []StarvedCluster `json:"starved,omitempty"`
}

// EndpointState is one endpoint as EDS serves it.
type EndpointState struct {
	Health   string `json:"health"`
	Weight   uint32 `json:"weight"`
	Priority uint32 `json:"priority,omitempty"`
}

// StarvedCluster is a routed-to cluster with no healthy endpoint, and the
// groups whose routes send traffic to it.
type StarvedCluster struct {
	Cluster   string   `json:"cluster"`
	Endpoints int      `json:"endpoints"`
	Groups    []string `json:"groups"`
}

// proxylessGroup names the proxyless gRPC API listeners in ServiceUsage.
const proxylessGroup = "(proxyless gRPC)"

// serviceUsage maps Consul service name to its usage in model m.
func serviceUsage(m *ir.Model) map[string]*ServiceUsage {
	if m == nil {
		return nil
	}
	clusterService := map[string]string{}
	out := map[string]*ServiceUsage{}
	healthy := map[string]int{}
	for _, c := range m.Clusters {
		svc := c.Service
		if svc == "" {
			svc = c.Name
		}
		clusterService[c.Name] = svc
		u := out[svc]
		if u == nil {
			u = &ServiceUsage{Endpoints: map[string]map[string]EndpointState{}}
			out[svc] = u
		}
		u.Clusters = append(u.Clusters, c.Name)
		eps := map[string]EndpointState{}
		for _, e := range c.Endpoints {
			eps[netip.AddrPortFrom(e.Address, uint16(e.Port)).String()] = EndpointState{Health: e.Health.String(), Weight: e.Weight, Priority: e.Priority}
			if e.Health == ir.Healthy {
				healthy[c.Name]++
			}
		}
		u.Endpoints[c.Name] = eps
	}
	groups := map[string]map[string]bool{}   // service -> groups
	routedBy := map[string]map[string]bool{} // cluster -> groups
	mark := func(group, cluster string) {
		svc, ok := clusterService[cluster]
		if !ok {
			return
		}
		if groups[svc] == nil {
			groups[svc] = map[string]bool{}
		}
		groups[svc][group] = true
		if routedBy[cluster] == nil {
			routedBy[cluster] = map[string]bool{}
		}
		routedBy[cluster][group] = true
	}
	walk := func(group string, ls []ir.Listener) {
		for _, l := range ls {
			for _, wc := range l.TCP {
				mark(group, wc.Name)
			}
			for _, vh := range l.VirtualHosts {
				for _, r := range vh.Routes {
					for _, wc := range r.Clusters {
						mark(group, wc.Name)
					}
					if r.Mirror != nil {
						mark(group, r.Mirror.Cluster)
					}
				}
			}
		}
	}
	for _, g := range m.Groups {
		walk(g.Name, g.Listeners)
	}
	walk(proxylessGroup, m.Proxyless)
	for svc, u := range out {
		slices.Sort(u.Clusters)
		u.Groups = slices.Sorted(maps.Keys(groups[svc]))
		for _, c := range u.Clusters {
			if routedBy[c] != nil && healthy[c] == 0 {
				u.Starved = append(u.Starved, StarvedCluster{Cluster: c, Endpoints: len(u.Endpoints[c]), Groups: slices.Sorted(maps.Keys(routedBy[c]))})
			}
		}
	}
	return out
}

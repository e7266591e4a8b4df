package bridge

import (
	"embed"
	"io/fs"
	"maps"
	"net/http"
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
	for _, c := range m.Clusters {
		svc := c.Service
		if svc == "" {
			svc = c.Name
		}
		clusterService[c.Name] = svc
		u := out[svc]
		if u == nil {
			u = &ServiceUsage{}
			out[svc] = u
		}
		u.Clusters = append(u.Clusters, c.Name)
	}
	groups := map[string]map[string]bool{} // service -> groups
	mark := func(group, cluster string) {
		svc, ok := clusterService[cluster]
		if !ok {
			return
		}
		if groups[svc] == nil {
			groups[svc] = map[string]bool{}
		}
		groups[svc][group] = true
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
	}
	return out
}

// Package tagroute reads routes that services declare on their own
// Consul registrations, as Fabio and Traefik users write them:
//
//	urlprefix-shop.example.com/api strip=/api        (Fabio)
//	traefik.http.routers.api.rule=Host(`shop.example.com`) && PathPrefix(`/api`)   (Traefik)
//
// into routes of the bridge's model. A tag that does not parse is a
// warning naming the service and the tag, never an error. Pure: no I/O.
package tagroute

import (
	"cmp"
	"slices"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Formats are the tag formats read.
var Formats = []string{"fabio", "traefik"}

// Service is a catalog service and the tags of its instances.
type Service struct {
	Name string
	Tags []string
}

// Route is a route for requests to Host ("" for any host).
type Route struct {
	Host  string
	Route ir.Route
	// Services are the services the route sends to.
	Services []string
	priority int
	order    string // tie-break: service and tag
	claim    claim  // Traefik: the claim owners admits the route by
}

// Routes reads every service's tags in format and returns the routes
// for one listener, most specific first (Fabio: longer paths; Traefik:
// priority, by default the rule's length), with one warning per tag that
// does not parse and per claim owners refuses. Hosts come back
// lower-cased: Envoy matches them case-insensitively.
func Routes(format string, services []Service, owners Owners) ([]Route, []string) {
	var routes []Route
	var warnings []string
	switch format {
	case "fabio":
		routes, warnings = fabio(services, owners)
	case "traefik":
		routes, warnings = traefik(services, owners)
	}
	slices.SortStableFunc(routes, func(a, b Route) int {
		return cmp.Or(cmp.Compare(b.priority, a.priority), strings.Compare(a.Host, b.Host), strings.Compare(a.order, b.order))
	})
	return routes, warnings
}

// uniqueTags is the union of a service's instance tags, sorted.
func uniqueTags(tags []string) []string {
	out := slices.Clone(tags)
	slices.Sort(out)
	return slices.Compact(out)
}

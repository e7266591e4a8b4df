package routetest

import (
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/routetest/routematch"
)

// Outcome is where one request goes in a route configuration, told as a
// route test tells it.
type Outcome struct {
	VirtualHost string `json:"virtual_host"`
	// Route is the matched route's name in the RouteConfiguration, ""
	// when none matched.
	Route string `json:"route"`
	// Got is what a route test reports: `cluster "api"`, `split {...}`,
	// `redirect 301 to "..."`, `direct response 200`, `no route (404)`.
	Got string `json:"got"`
	// Clusters are the clusters the request may go to, with their
	// weights (one cluster: weight 100).
	Clusters []WeightedCluster `json:"clusters,omitempty"`
}

// WeightedCluster is one cluster a route sends to.
type WeightedCluster struct {
	Name   string `json:"name"`
	Weight uint32 `json:"weight"`
}

// Try evaluates req (scheme "" is http) against rc with the matcher and
// the wording of route tests, so the console's "Try a request" and
// `consul-xds-bridge test` give one answer for one request.
func Try(rc *routev3.RouteConfiguration, req routematch.Request, scheme string) Outcome {
	if req.Method == "" {
		req.Method = "GET"
	}
	if req.Path == "" {
		req.Path = "/"
	}
	if scheme == "" {
		scheme = "http"
	}
	t := &Test{Request: req, Scheme: scheme}
	m := routematch.Match(rc, req)
	c := &check{t: t, res: &Result{Test: t}, m: m}
	o := Outcome{VirtualHost: m.VirtualHost.GetName(), Route: m.Route.GetName(), Got: c.got()}
	if a := c.routeAction(); a != nil && m.Route != nil {
		if cl := a.GetCluster(); cl != "" {
			o.Clusters = []WeightedCluster{{Name: cl, Weight: 100}}
		}
		for _, wc := range a.GetWeightedClusters().GetClusters() {
			o.Clusters = append(o.Clusters, WeightedCluster{Name: wc.GetName(), Weight: wc.GetWeight().GetValue()})
		}
	}
	return o
}

package bridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/consul-xds-bridge/consul-xds-bridge/routetest"
	"github.com/consul-xds-bridge/consul-xds-bridge/routetest/routematch"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// TryResult is what GET /v1/try answers: where the served routes of a
// node.cluster send one request, told as a route test tells it, and the
// endpoints that could answer it.
type TryResult struct {
	NodeCluster string            `json:"node_cluster"`
	Group       string            `json:"group"`
	RouteConfig string            `json:"route_config"`
	Outcome     routetest.Outcome `json:"outcome"`
	// Source is where the policy declares the matched route.
	Source string `json:"source,omitempty"`
	// Endpoints are the clusters' endpoints as EDS serves them.
	Endpoints map[string][]TryEndpoint `json:"endpoints,omitempty"`
}

// TryEndpoint is one endpoint of a cluster the request may go to.
type TryEndpoint struct {
	Address string `json:"address"`
	Health  string `json:"health"`
	Weight  uint32 `json:"weight"`
}

// serveTry evaluates ?host, path, method, scheme and header ("Name:
// value", repeated) against the RDS the bridge serves now to node.cluster
// ?cluster (listener ?listener, optional when there is one), with
// routetest's matcher: what the console's "Try a request" shows. It reads
// only what /v1/config_dump already shows.
func (d *Daemon) serveTry(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	res, status, err := d.try(q.Get("cluster"), q.Get("listener"), routematch.Request{
		Host: q.Get("host"), Path: q.Get("path"), Method: strings.ToUpper(q.Get("method")), Headers: tryHeaders(q["header"]),
	}, q.Get("scheme"))
	if err != nil {
		writeJSON(w, status, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (d *Daemon) try(nodeCluster, listener string, req routematch.Request, scheme string) (*TryResult, int, error) {
	dump, err := d.xds.ConfigDump("", nodeCluster)
	switch {
	case errors.Is(err, serve.ErrNotReady):
		return nil, http.StatusServiceUnavailable, err
	case err != nil:
		return nil, http.StatusInternalServerError, err
	}
	var names []string
	var rc *routev3.RouteConfiguration
	for _, raw := range dump.Routes {
		c := &routev3.RouteConfiguration{}
		if err := protojson.Unmarshal(raw, c); err != nil {
			return nil, http.StatusInternalServerError, err
		}
		names = append(names, c.GetName())
		if listener == "" && len(dump.Routes) == 1 || listener != "" && c.GetName() == dump.Group+"."+listener {
			rc = c
		}
	}
	if rc == nil {
		return nil, http.StatusNotFound, fmt.Errorf("node.cluster %q (group %q) is served no route configuration for listener %q; it has %q", nodeCluster, dump.Group, listener, names)
	}
	res := &TryResult{NodeCluster: nodeCluster, Group: dump.Group, RouteConfig: rc.GetName(), Outcome: routetest.Try(rc, req, scheme)}
	res.Source = dump.RouteSources[rc.GetName()+"/"+res.Outcome.Route]
	for _, raw := range dump.Endpoints {
		var cla endpointv3.ClusterLoadAssignment
		if json.Unmarshal(raw, &struct{}{}) != nil || protojson.Unmarshal(raw, &cla) != nil {
			continue
		}
		for _, c := range res.Outcome.Clusters {
			if c.Name != cla.GetClusterName() {
				continue
			}
			if res.Endpoints == nil {
				res.Endpoints = map[string][]TryEndpoint{}
			}
			for _, l := range cla.GetEndpoints() {
				for _, e := range l.GetLbEndpoints() {
					sa := e.GetEndpoint().GetAddress().GetSocketAddress()
					res.Endpoints[c.Name] = append(res.Endpoints[c.Name], TryEndpoint{
						Address: fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()),
						Health:  e.GetHealthStatus().String(), Weight: e.GetLoadBalancingWeight().GetValue(),
					})
				}
			}
		}
	}
	return res, http.StatusOK, nil
}

// tryHeaders reads "Name: value" pairs into the lower-case map route
// tests use.
func tryHeaders(pairs []string) map[string]string {
	out := map[string]string{}
	for _, p := range pairs {
		name, value, ok := strings.Cut(p, ":")
		if ok && strings.TrimSpace(name) != "" {
			out[strings.ToLower(strings.TrimSpace(name))] = strings.TrimSpace(value)
		}
	}
	return out
}

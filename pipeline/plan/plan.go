// Package plan compares what a running bridge serves with what a policy
// would serve, for `consul-xds-bridge plan`: added, removed and changed
// resources by type, with endpoint counts, like terraform plan.
package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// Action is what a change does to a resource.
type Action string

// Actions, in the order they are printed.
const (
	Add    Action = "+"
	Modify Action = "~"
	Remove Action = "-"
)

// Change is one resource that differs.
type Change struct {
	Action Action
	Kind   string // cluster, endpoints, listener, route
	Name   string
	// Detail says what changed where a count tells it best (endpoints).
	Detail string
	// Fields lists, for a changed resource, what changed in it, field by
	// field ("~ path: old → new"); endpoints are told by Detail instead.
	Fields []string
}

// Dump builds the config dump a node.cluster of group would get from a
// translation (see DumpRole, which also resolves the group and covers
// proxyless clients). An Output assembled without reach (not by
// Translate) shares everything.
func Dump(out *xds.Output, nodeCluster, group string) (*xds.ConfigDump, error) {
	// A node gets its group's reach of the clusters, endpoints and
	// upstream secrets (nodes in no group: Unmatched).
	reach := out.Shared
	switch {
	case out.Reach == nil:
	case out.Groups[group] != nil && group != "":
		reach = out.Reach[group]
	default:
		reach = out.Unmatched
	}
	var g *xds.Resources
	if group != "" {
		g = out.Groups[group]
	}
	d, err := dumpOf(g, reach)
	d.NodeCluster, d.Group = nodeCluster, group
	return d, err
}

// dumpOf renders a group's listeners, routes and secrets (nil: none) and
// its reach of clusters, endpoints and upstream secrets.
func dumpOf(group, reach *xds.Resources) (*xds.ConfigDump, error) {
	d := &xds.ConfigDump{}
	var errs []error
	add := func(dst *[]json.RawMessage, items []types.Resource) {
		for _, r := range items {
			b, err := xds.MarshalResource(r)
			errs = append(errs, err)
			*dst = append(*dst, b)
		}
	}
	if reach == nil {
		reach = &xds.Resources{}
	}
	shared := reach.ByType()
	add(&d.Clusters, shared[resourcev3.ClusterType])
	add(&d.Endpoints, shared[resourcev3.EndpointType])
	add(&d.Secrets, shared[resourcev3.SecretType])
	if group != nil {
		gt := group.ByType()
		add(&d.Listeners, gt[resourcev3.ListenerType])
		add(&d.Routes, gt[resourcev3.RouteType])
		add(&d.Secrets, gt[resourcev3.SecretType])
		d.RouteSources = group.RouteSources
	}
	return d, errors.Join(errs...)
}

// OnlyGroupSecrets drops the shared secrets (upstream TLS) from a group's
// dump, so a plan shows them once, in the shared section.
func OnlyGroupSecrets(secrets []json.RawMessage, shared *xds.Resources) []json.RawMessage {
	names := map[string]bool{}
	for _, s := range shared.Secrets {
		names[s.GetName()] = true
	}
	var out []json.RawMessage
	for _, raw := range secrets {
		var v struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(raw, &v) == nil && names[v.Name] {
			continue
		}
		out = append(out, raw)
	}
	return out
}

// Diff lists the changes from running to planned, sorted by kind and name.
func Diff(running, planned *xds.ConfigDump) ([]Change, error) {
	var out []Change
	for _, k := range []struct {
		kind     string
		nameKey  string
		old, new []json.RawMessage
	}{
		{"cluster", "name", running.Clusters, planned.Clusters},
		{"endpoints", "cluster_name", running.Endpoints, planned.Endpoints},
		{"listener", "name", running.Listeners, planned.Listeners},
		{"route", "name", running.Routes, planned.Routes},
		// Keys are redacted on both sides; certificates and CAs still show.
		{"secret", "name", running.Secrets, planned.Secrets},
	} {
		oldByName, err := index(k.old, k.nameKey)
		if err != nil {
			return nil, fmt.Errorf("running %s: %w", k.kind, err)
		}
		newByName, err := index(k.new, k.nameKey)
		if err != nil {
			return nil, fmt.Errorf("planned %s: %w", k.kind, err)
		}
		names := slices.Sorted(maps.Keys(oldByName))
		for n := range newByName {
			if _, ok := oldByName[n]; !ok {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		for _, n := range names {
			o, inOld := oldByName[n]
			nw, inNew := newByName[n]
			c := Change{Kind: k.kind, Name: n}
			switch {
			case !inOld:
				c.Action = Add
			case !inNew:
				c.Action = Remove
			case !bytes.Equal(o, nw):
				c.Action = Modify
			default:
				continue
			}
			switch {
			case k.kind == "endpoints":
				c.Detail = endpointDetail(o, nw)
			case k.kind == "route" && inNew:
				c.Detail = routeSources(planned.RouteSources, n)
			}
			if c.Action == Modify && k.kind != "endpoints" {
				c.Fields = fieldDiff(o, nw)
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// routeSources says where the policy declares the routes of route
// configuration rc ("routes at edge.hcl:12:7, edge.hcl:20:7").
func routeSources(sources map[string]string, rc string) string {
	var at []string
	for _, k := range slices.Sorted(maps.Keys(sources)) {
		if strings.HasPrefix(k, rc+"/") {
			at = append(at, sources[k])
		}
	}
	if len(at) == 0 {
		return ""
	}
	return "routes at " + strings.Join(at, ", ")
}

// index maps resource name to a canonical encoding: protojson from two
// processes may differ in whitespace, so both sides are re-encoded with
// encoding/json, whose map keys are sorted.
func index(items []json.RawMessage, nameKey string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, raw := range items {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, err
		}
		name, _ := m[nameKey].(string)
		canon, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		out[name] = canon
	}
	return out, nil
}

// endpointDetail counts endpoints and healthy ones on each side.
func endpointDetail(old, new []byte) string {
	ot, oh := countEndpoints(old)
	nt, nh := countEndpoints(new)
	switch {
	case old == nil:
		return fmt.Sprintf("%d endpoints (%d healthy)", nt, nh)
	case new == nil:
		return fmt.Sprintf("%d endpoints (%d healthy)", ot, oh)
	}
	return fmt.Sprintf("%d → %d endpoints (%d → %d healthy)", ot, nt, oh, nh)
}

func countEndpoints(cla []byte) (total, healthy int) {
	var v struct {
		Endpoints []struct {
			LbEndpoints []struct {
				HealthStatus string `json:"health_status"`
			} `json:"lb_endpoints"`
		} `json:"endpoints"`
	}
	if json.Unmarshal(cla, &v) != nil {
		return 0, 0
	}
	for _, l := range v.Endpoints {
		for _, e := range l.LbEndpoints {
			total++
			// protojson omits the zero value UNKNOWN, which Envoy treats
			// as healthy.
			if e.HealthStatus == "" || e.HealthStatus == "HEALTHY" || e.HealthStatus == "UNKNOWN" {
				healthy++
			}
		}
	}
	return total, healthy
}

// Render prints changes like terraform plan and a summary line.
func Render(w io.Writer, title string, changes []Change) {
	fmt.Fprintln(w, title)
	if len(changes) == 0 {
		fmt.Fprintln(w, "  No changes.")
		return
	}
	counts := map[Action]int{}
	for _, c := range changes {
		counts[c.Action]++
		line := fmt.Sprintf("  %s %-9s %s", c.Action, c.Kind, c.Name)
		if c.Detail != "" {
			line += ": " + c.Detail
		}
		fmt.Fprintln(w, strings.TrimRight(line, " "))
		for _, f := range c.Fields {
			fmt.Fprintln(w, "      "+f)
		}
	}
	fmt.Fprintf(w, "  %d to add, %d to change, %d to remove.\n", counts[Add], counts[Modify], counts[Remove])
}

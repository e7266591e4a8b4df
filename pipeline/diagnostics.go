package pipeline

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// Failure is one role that cannot be served this time: a proxy group (a
// Connect sidecar's group included), or "" for the proxyless resources of
// no declared group. Serving keeps the role's last good resources.
type Failure struct {
	Group string
	Err   error
}

// Failures lists the world's failures by group, sorted, and the proxyless
// failure once: groups declared proxyless carry it already.
func (w *World) Failures() []Failure { return failures(w.Output) }

func failures(out *xds.Output) []Failure {
	var fs []Failure
	proxylessSeen := false
	for _, g := range slices.Sorted(maps.Keys(out.Failed)) {
		fs = append(fs, Failure{g, out.Failed[g]})
		proxylessSeen = proxylessSeen || out.Failed[g] == out.ProxylessFailed
	}
	if out.ProxylessFailed != nil && !proxylessSeen {
		fs = append(fs, Failure{"", out.ProxylessFailed})
	}
	return fs
}

// Check computes the world for in from scratch and reports, as
// diagnostics, what would keep a role from being served: a policy that
// validates can still describe resources Envoy refuses (a header value
// with a newline, say). `validate` and the console's plan use it; the
// reload gate uses Diagnose on a forked Memo so an accepted candidate's
// work is reused.
func Check(in Input) hcl.Diagnostics {
	if in.Policy == nil {
		return nil
	}
	w, err := Compute(in, nil)
	return Diagnose(w, err, in.Policy)
}

// Diagnose turns a Compute result into diagnostics against pol: an error
// (the shared resources cannot be served), then each failing role, pointing
// at the route (or else the listener) Envoy's validation names.
func Diagnose(w *World, err error, pol *policy.Policy) hcl.Diagnostics {
	return DiagnoseExcept(w, err, pol, nil)
}

// DiagnoseExcept is Diagnose, except for the groups failing names: those
// the running bridge's last build already could not translate (odd Consul
// data, say). They keep their last good state whatever the policy, so a
// reload is not refused for them: it would hold every other group's
// policy change hostage to data the policy did not bring.
func DiagnoseExcept(w *World, err error, pol *policy.Policy, failing map[string]bool) hcl.Diagnostics {
	if err != nil {
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Policy cannot be translated to Envoy resources",
			Detail:   err.Error() + "; the last good policy keeps serving. Fix the settings the message names.",
		}}
	}
	var diags hcl.Diagnostics
	for _, f := range w.Failures() {
		if failing[f.Group] {
			continue
		}
		d := &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  fmt.Sprintf("Proxy group %q cannot be translated to Envoy resources", f.Group),
			Detail:   f.Err.Error() + "; the last good policy keeps serving.",
		}
		if f.Group == "" {
			d.Summary = "grpc_service routes cannot be translated for proxyless gRPC clients"
		}
		if pol != nil {
			d.Subject = failureRange(pol, f.Group, f.Err)
		}
		diags = append(diags, d)
	}
	return diags
}

// Envoy's validation errors name the route configuration and the
// positions inside it: `RouteConfiguration "G.L" ...
// VirtualHosts[i]: ... Routes[j]`.
var (
	routeConfigRE = regexp.MustCompile(`RouteConfiguration "([^"]+)"`)
	vhRE          = regexp.MustCompile(`VirtualHosts\[(\d+)\]`)
	routeRE       = regexp.MustCompile(`Routes\[(\d+)\]`)
)

// failureRange finds where in the policy a group's failure comes from:
// the route Envoy's validation names, else its listener, else nil.
func failureRange(pol *policy.Policy, group string, err error) *hcl.Range {
	msg := err.Error()
	rc := routeConfigRE.FindStringSubmatch(msg)
	if rc == nil {
		return nil
	}
	i := slices.IndexFunc(pol.Proxies, func(p *policy.Proxy) bool { return p.Name == group })
	if i < 0 {
		return meshRouteRange(pol, group, rc[1], msg)
	}
	p := pol.Proxies[i]
	for _, l := range p.Listeners {
		if group+"."+l.Name != rc[1] {
			continue
		}
		vh, r := vhRE.FindStringSubmatch(msg), routeRE.FindStringSubmatch(msg)
		if vh != nil && r != nil {
			i, _ := strconv.Atoi(vh[1])
			j, _ := strconv.Atoi(r[1])
			if i < len(l.VirtualHosts) && j < len(l.VirtualHosts[i].Routes) {
				rng := l.VirtualHosts[i].Routes[j].Range
				return &rng
			}
		}
		rng := l.Range
		return &rng
	}
	return nil
}

// meshRouteRange finds the mesh_routes route a sidecar's failure comes
// from: its upstream route configuration GROUP.upstream.SERVICE[.DC]
// holds that service's mesh_routes routes first, in order.
func meshRouteRange(pol *policy.Policy, group, routeConfig, msg string) *hcl.Range {
	if !strings.HasPrefix(group, ir.SidecarGroupPrefix) {
		return nil
	}
	rest, ok := strings.CutPrefix(routeConfig, group+".upstream.")
	if !ok {
		return nil
	}
	service, _, _ := strings.Cut(rest, ".")
	mr := pol.MeshRoutesFor(service)
	if mr == nil || len(mr.Routes) == 0 {
		return nil
	}
	if r := routeRE.FindStringSubmatch(msg); r != nil {
		if j, _ := strconv.Atoi(r[1]); j < len(mr.Routes) {
			rng := mr.Routes[j].Range
			return &rng
		}
	}
	rng := mr.Routes[0].Range
	return &rng
}

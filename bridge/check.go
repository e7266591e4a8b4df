package bridge

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// CheckTranslation builds and translates pol against cat (nil: an empty
// catalog) with tr (nil: a fresh Translator) and reports what the
// translator rejects as diagnostics: a policy that validates can still
// describe resources Envoy refuses (a header value with a newline, say).
// A reload and `validate` accept a policy only if this finds nothing, so a
// policy that cannot be served never replaces one that can. A failure in
// one proxy group points at the route (or else the listener) it comes
// from. The daemon passes its own Translator: the build that follows an
// accepted reload then reuses what this translated.
func CheckTranslation(cat *consul.Catalog, pol *policy.Policy, tr *xds.Translator) hcl.Diagnostics {
	if pol == nil {
		return nil
	}
	if tr == nil {
		tr = xds.NewTranslator()
	}
	m, _ := model.Build(cat, pol)
	out, err := tr.Translate(m)
	if err != nil {
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Policy cannot be translated to Envoy resources",
			Detail:   err.Error() + "; the last good policy keeps serving. Fix the settings the message names.",
		}}
	}
	var diags hcl.Diagnostics
	for _, f := range groupFailures(out) {
		d := &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  fmt.Sprintf("Proxy group %q cannot be translated to Envoy resources", f.group),
			Detail:   f.err.Error() + "; the last good policy keeps serving.",
		}
		if f.group == "" {
			d.Summary = "grpc_service routes cannot be translated for proxyless gRPC clients"
		}
		d.Subject = failureRange(pol, f.group, f.err)
		diags = append(diags, d)
	}
	return diags
}

type groupFailure struct {
	group string // "" for the proxyless resources of no declared group
	err   error
}

// groupFailures lists a translation's failures by group, sorted, and the
// proxyless failure once: groups declared proxyless carry it already.
func groupFailures(out *xds.Output) []groupFailure {
	var fs []groupFailure
	proxylessSeen := false
	for _, g := range slices.Sorted(maps.Keys(out.Failed)) {
		fs = append(fs, groupFailure{g, out.Failed[g]})
		proxylessSeen = proxylessSeen || out.Failed[g] == out.ProxylessFailed
	}
	if out.ProxylessFailed != nil && !proxylessSeen {
		fs = append(fs, groupFailure{"", out.ProxylessFailed})
	}
	return fs
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
	i := slices.IndexFunc(pol.Proxies, func(p *policy.Proxy) bool { return p.Name == group })
	if i < 0 {
		return nil
	}
	p := pol.Proxies[i]
	msg := err.Error()
	rc := routeConfigRE.FindStringSubmatch(msg)
	if rc == nil {
		return nil
	}
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

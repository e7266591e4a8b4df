package policy

import (
	"fmt"
	"maps"
	"net/netip"
	"path"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/tagroute"
)

func (r *resolver) proxy(b *proxyBlock) *Proxy {
	p := &Proxy{Name: b.Name, Source: pos(b.DefRange), Upstreams: r.upstreams(b)}
	if ls := b.LocalService; ls != nil {
		// The bootstrap's local cluster takes this service's endpoints
		// over EDS (zone aware routing), so the group must reach them.
		p.LocalService = *ls
		if !ir.QueryableServiceName(*ls) {
			r.add(valueRange(b.Body, "local_service", b.DefRange), "Invalid service name", unqueryable, *ls)
		} else if !slices.Contains(p.Upstreams, *ls) {
			p.Upstreams = append(p.Upstreams, *ls)
			slices.Sort(p.Upstreams)
		}
	}
	if b.ExportAllServices != nil {
		p.ExportAllServices = *b.ExportAllServices
	}
	if len(b.Listeners) > MaxListenersPerGroup {
		r.add(b.Listeners[MaxListenersPerGroup].DefRange, "Too many listeners",
			"proxy %q declares %d listeners; the limit is %d per group. Split it into several groups.", b.Name, len(b.Listeners), MaxListenersPerGroup)
	}
	if strings.HasPrefix(b.Name, ir.SidecarGroupPrefix) {
		r.add(b.DefRange, "Reserved proxy group name", "proxy %q: names starting with %q are the groups of registered Connect sidecars, which are known by node id; rename the group (or use sidecar_for).", b.Name, ir.SidecarGroupPrefix)
	}
	if _, err := path.Match(b.Name, ""); err != nil || b.Name == "" {
		r.add(b.DefRange, "Invalid proxy group", "proxy %q is not a valid name or glob pattern (path.Match syntax: *, ?, [a-z]).", b.Name)
	}
	if b.SidecarFor != nil {
		r.sidecarFor(b, p)
		return p
	}
	if b.Proxyless != nil && *b.Proxyless {
		p.Proxyless = true
		for _, lb := range b.Listeners {
			r.add(lb.DefRange, "Listener in a proxyless group",
				"proxy %q is proxyless = true: its nodes are gRPC clients, which get API listeners from grpc_service blocks (or one per service by default), not listeners. Remove the listener blocks or proxyless = true.", b.Name)
		}
		return p
	}
	names := map[string]hcl.Range{}
	ports := map[int]hcl.Range{}
	for _, lb := range b.Listeners {
		if prev, ok := names[lb.Name]; ok {
			r.add(lb.DefRange, "Duplicate listener", "listener %q of proxy %q is already defined at %s; listener names must be unique within a proxy group.", lb.Name, b.Name, pos(prev))
			continue
		}
		names[lb.Name] = lb.DefRange
		portRange := valueRange(lb.Body, "port", lb.DefRange)
		if prev, ok := ports[lb.Port]; ok {
			r.add(portRange, "Duplicate port", "port %d is already used by another listener of proxy %q at %s; give each listener its own port.", lb.Port, b.Name, pos(prev))
		} else {
			ports[lb.Port] = lb.DefRange
		}
		p.Listeners = append(p.Listeners, r.listener(b.Name, lb))
	}
	if len(b.Listeners) == 0 && len(p.Upstreams) == 0 && !p.ExportAllServices {
		r.add(b.DefRange, "Proxy without listeners", "proxy %q declares no listener and no upstreams; add a listener block or upstreams = [...], or set proxyless = true for a group of proxyless gRPC clients.", b.Name)
	}
	return p
}

// upstreams checks a proxy block's upstreams: sorted, without duplicates,
// each a plausible service (or, for a proxyless group, xDS target) name.
func (r *resolver) upstreams(b *proxyBlock) []string {
	rng := valueRange(b.Body, "upstreams", b.DefRange)
	seen := map[string]bool{}
	var out []string
	for _, u := range b.Upstreams {
		switch {
		case u == "" || strings.ContainsAny(u, "/ \t"):
			r.add(rng, "Invalid upstream", "proxy %q: upstream %q is not a service name.", b.Name, u)
		case seen[u]:
			r.add(rng, "Duplicate upstream", "proxy %q lists upstream %q twice.", b.Name, u)
		default:
			seen[u] = true
			out = append(out, u)
		}
	}
	slices.Sort(out)
	return out
}

func (r *resolver) listener(group string, b *listenerBlock) *Listener {
	l := &Listener{Name: b.Name, Address: DefaultListenAddress, Port: b.Port, Protocol: "http", Source: pos(b.DefRange), Range: b.DefRange}
	set(&l.Address, b.Address)
	set(&l.Protocol, b.Protocol)
	where := fmt.Sprintf("listener %q of proxy %q", b.Name, group)
	if strings.Contains(b.Name, ".") {
		r.add(b.DefRange, "Invalid listener name", "%s: names may not contain \".\"; the Envoy listener is named \"%s.%s\".", where, group, b.Name)
	}
	if b.Port < 1 || b.Port > 65535 {
		r.add(valueRange(b.Body, "port", b.DefRange), "Invalid port", "%s: port %d is not between 1 and 65535.", where, b.Port)
	}
	if _, err := netip.ParseAddr(l.Address); err != nil {
		r.add(valueRange(b.Body, "address", b.DefRange), "Invalid listener address", "%s: %q is not an IP address; use a literal address such as \"0.0.0.0\", \"127.0.0.1\" or \"::\" (host names are not resolved).", where, l.Address)
	}
	if !oneOf(l.Protocol, protocols) {
		r.add(valueRange(b.Body, "protocol", b.DefRange), "Invalid protocol", "%s: protocol %q is not one of %s.", where, l.Protocol, quoteList(protocols))
	}
	r.extend(durationAttr(b.IdleTimeout, &l.IdleTimeout))
	if tr := b.TagRoutes; tr != nil {
		l.TagRoutes = tr.Format
		switch {
		case !slices.Contains(tagroute.Formats, tr.Format):
			r.add(valueRange(tr.Body, "format", tr.DefRange), "Invalid tag_routes format", "%s: format %q is not one of %s.", where, tr.Format, quoteList(tagroute.Formats))
		case l.Protocol != "http":
			r.add(tr.DefRange, "tag_routes on a tcp listener", "%s: tag routes match hosts and paths; use them on an http listener.", where)
		}
		l.TagRouteOwners = r.tagRouteOwners(tr, where)
	}
	switch l.Protocol {
	case "tcp":
		if len(b.VirtualHosts) > 0 {
			r.add(b.VirtualHosts[0].DefRange, "virtual_host on a tcp listener", "%s is protocol \"tcp\": it forwards connections, so it cannot route by host or path. Use protocol = \"http\".", where)
		}
		l.TCP = r.action(b.Body, b.DefRange, where, false, b.Service, b.Subset, b.Splits, 0)
	case "http":
		if b.Service != nil || len(b.Splits) > 0 {
			r.add(valueRange(b.Body, "service", b.DefRange), "service on an http listener", "%s: an http listener routes with virtual_host and route blocks; service and split apply to tcp listeners.", where)
		}
		if b.IdleTimeout != nil && !isNull(b.IdleTimeout) {
			r.add(b.IdleTimeout.Range(), "idle_timeout on an http listener", "%s: set idle_timeout on routes for http listeners.", where)
		}
		vhNames := map[string]hcl.Range{}
		type vhDomain struct {
			name string
			rng  hcl.Range
		}
		domains := map[string]vhDomain{}
		routes := 0
		for _, vb := range b.VirtualHosts {
			if prev, ok := vhNames[vb.Name]; ok {
				r.add(vb.DefRange, "Duplicate virtual_host", "virtual_host %q of %s is already defined at %s.", vb.Name, where, pos(prev))
				continue
			}
			vhNames[vb.Name] = vb.DefRange
			vh := &VirtualHost{Name: vb.Name, Domains: vb.Domains}
			if vb.TLS != nil {
				vh.Certificate = vb.TLS.Certificate
			}
			if len(vh.Domains) == 0 {
				vh.Domains = []string{"*"}
			}
			for i, d := range vh.Domains {
				rng := elemRange(vb.Body, "domains", i, vb.DefRange)
				if other, ok := domains[strings.ToLower(d)]; ok {
					r.add(rng, "Duplicate domain", "domain %q is also served by virtual_host %q of %s at %s; Envoy requires each domain once per listener, so remove it from one of them.", d, other.name, where, pos(other.rng))
				} else {
					domains[strings.ToLower(d)] = vhDomain{vb.Name, rng}
				}
				if d == "" || strings.Count(d, "*") > 1 || (strings.Contains(d, "*") && !strings.HasPrefix(d, "*") && !strings.HasSuffix(d, "*")) {
					r.add(rng, "Invalid domain", "domain %q: a wildcard may only be a prefix (\"*.example.com\") or suffix (\"example.*\"), or \"*\" alone.", d)
				}
			}
			for _, rb := range vb.Routes {
				routes++
				if routes == MaxRoutesPerListener+1 {
					r.add(rb.DefRange, "Too many routes", "%s has more than %d routes; split it across listeners or virtual hosts' domains, or use regex matches.", where, MaxRoutesPerListener)
				}
				vh.Routes = append(vh.Routes, r.route(rb, fmt.Sprintf("route of virtual_host %q", vb.Name)))
			}
			r.vhostHTTP(vb, vh)
			if len(vb.Routes) == 0 {
				r.add(vb.DefRange, "virtual_host without routes", "virtual_host %q of %s has no route block, so every request to it would get 404; add a route block.", vb.Name, where)
			}
			l.VirtualHosts = append(l.VirtualHosts, vh)
		}
		if routes == 0 && len(b.VirtualHosts) == 0 && l.TagRoutes == "" {
			r.add(b.DefRange, "Listener without routes", "%s is protocol \"http\" but has no virtual_host with routes; add a virtual_host block with a route, or use protocol = \"tcp\" with service = \"...\".", where)
		}
	}
	l.TLS = r.listenerTLS(group, b, l, where)
	r.listenerHTTP(group, b, l, where)
	return l
}

// tagRouteOwners checks tag_routes owners: keys are hosts, "*" or "/PATH",
// each once when compared case-insensitively (as Envoy compares hosts).
func (r *resolver) tagRouteOwners(tr *tagRoutesBlock, where string) map[string][]string {
	if len(tr.Owners) == 0 {
		return nil
	}
	rng := valueRange(tr.Body, "owners", tr.DefRange)
	seen := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(tr.Owners)) {
		switch lk := strings.ToLower(k); {
		case k == "" || strings.ContainsAny(k, " \t") || (strings.Contains(k, "/") && !strings.HasPrefix(k, "/")):
			r.add(rng, "Invalid tag_routes owners key", "%s: owners key %q is not a host, \"*\" (routes without a host) or \"/PATH\" (routes without a host, of that path).", where, k)
		case seen[lk] != "":
			r.add(rng, "Duplicate tag_routes owners key", "%s: owners keys %q and %q are the same host (hosts compare case-insensitively); keep one.", where, seen[lk], k)
		default:
			seen[lk] = k
		}
		for _, s := range tr.Owners[k] {
			if s == "" {
				r.add(rng, "Invalid tag_routes owner", "%s: owners[%q] lists an empty service name.", where, k)
			}
		}
	}
	return tr.Owners
}

package configentry

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// target is one destination of a route after Consul's chain: a router's
// destination goes through the service's splitter (when it names no
// subset), and a subset-less destination to the resolver's default subset.
type target struct {
	service, subset string
	weight          int64
}

func (t *translator) dest(svc, subset string, depth int) []target {
	if sp := t.e.Splitters[svc]; sp != nil && subset == "" && depth < 8 {
		t.used(&t.usedSplitters, svc)
		var out []target
		for _, s := range sp.Splits {
			to := s.Service
			if to == "" {
				to = svc
			}
			if s.RequestHeaders != nil || s.ResponseHeaders != nil {
				t.note(api.ServiceSplitter, svc, "header changes per split are not translated")
			}
			if sp := otherSpace(s.Namespace, s.Partition); sp != "" {
				t.note(api.ServiceSplitter, svc, "split to %q: a service in another namespace or partition (%s) is not translated; the split goes to the same-named service in the bridge's catalog instead", to, sp)
			}
			w := int64(math.Round(float64(s.Weight) * 100)) // Consul: percentages with two decimals
			if w <= 0 {
				continue
			}
			var sub []target
			if to == svc {
				sub = []target{t.leaf(to, s.ServiceSubset, 0)}
			} else {
				sub = t.dest(to, s.ServiceSubset, depth+1)
			}
			for _, x := range sub {
				x.weight = w * max(x.weight, 1) / sumWeight(sub)
				out = append(out, x)
			}
		}
		if len(out) > 0 {
			return reduce(out)
		}
	}
	return []target{t.leaf(svc, subset, 0)}
}

// leaf is where the resolver of svc sends a target: a redirect to
// another service (or subset) in this datacenter is followed to that
// service's resolver, as Consul's chain does (its router and splitter are
// not); then the default subset.
func (t *translator) leaf(svc, subset string, depth int) target {
	if r := t.e.Resolvers[svc]; r != nil && localRedirect(r.Redirect) && depth < 8 {
		rd := r.Redirect
		return t.leaf(cmp.Or(rd.Service, svc), rd.ServiceSubset, depth+1)
	}
	if subset == "" {
		if r := t.e.Resolvers[svc]; r != nil {
			subset = r.DefaultSubset
		}
	}
	if t.mesh && subset != "" && !t.translatableSubset(svc, subset) {
		// Its filter has no equivalent (noted at the resolver): the
		// mesh keeps serving the service rather than refusing the entry.
		t.note(api.ServiceResolver, svc, "subset %q is not translated, so the chain's traffic for it goes to every instance of %s", subset, svc)
		subset = ""
	}
	return target{service: label(svc), subset: subset, weight: 1}
}

// hasChain reports whether svc gets a chain block: an L7 service (http,
// http2 or grpc, from its service-defaults) with a router, a splitter, a
// default subset, a redirect the chain follows or a request timeout
// (Consul's chain starts at that resolver and its routes carry it).
func (t *translator) hasChain(svc string) bool {
	switch t.protocol(svc) {
	case "http", "http2", "grpc":
	default:
		return false
	}
	r := t.e.Resolvers[svc]
	return t.e.Routers[svc] != nil || t.e.Splitters[svc] != nil || (r != nil && (r.DefaultSubset != "" || localRedirect(r.Redirect) || r.RequestTimeout > 0))
}

// localRedirect reports whether rd redirects to another service or subset
// in this datacenter, which the chain follows (a datacenter alone is the
// service block's datacenter; peers and sameness groups have no
// equivalent).
func localRedirect(rd *api.ServiceResolverRedirect) bool {
	return rd != nil && (rd.Service != "" || rd.ServiceSubset != "") && rd.Datacenter == "" && rd.Peer == "" && rd.SamenessGroup == "" && otherSpace(rd.Namespace, rd.Partition) == ""
}

// translatableSubset reports whether svc's resolver declares subset with a
// filter the service block can carry.
func (t *translator) translatableSubset(svc, subset string) bool {
	r := t.e.Resolvers[svc]
	if r == nil {
		return false
	}
	s, ok := r.Subsets[subset]
	if !ok {
		return false
	}
	_, _, ok = parseFilter(s.Filter)
	return ok
}

// chainOptOut marks a route the translation already sent through the
// chain (an ingress gateway's) so the policy does not apply it twice.
func (t *translator) chainOptOut(b *hclwrite.Body) {
	if t.expanded {
		b.SetAttributeValue("chain", cty.False)
	}
}

// merge joins targets of the same service and subset (a split over two
// subsets of one service, once the mesh dropped the subsets).
func merge(ts []target) []target {
	var out []target
	for _, x := range ts {
		i := slices.IndexFunc(out, func(o target) bool { return o.service == x.service && o.subset == x.subset })
		if i < 0 {
			out = append(out, x)
			continue
		}
		out[i].weight += x.weight
	}
	return out
}

// reduce gives whole percentages back as they were written (90 and 10
// rather than 9000 and 1000); fractional ones stay in hundredths.
func reduce(ts []target) []target {
	for _, x := range ts {
		if x.weight%100 != 0 {
			return ts
		}
	}
	for i := range ts {
		ts[i].weight /= 100
	}
	return ts
}

func sumWeight(ts []target) int64 {
	var n int64
	for _, x := range ts {
		n += max(x.weight, 1)
	}
	return n
}

func (t *translator) used(m *map[string]bool, name string) {
	if *m == nil {
		*m = map[string]bool{}
	}
	(*m)[name] = true
}

// setAction writes targets as service (+ subset) or split blocks.
func setAction(b *hclwrite.Body, ts []target) {
	ts = merge(ts)
	if len(ts) == 1 {
		b.SetAttributeValue("service", cty.StringVal(ts[0].service))
		if ts[0].subset != "" {
			b.SetAttributeValue("subset", cty.StringVal(ts[0].subset))
		}
		return
	}
	for _, x := range ts {
		sb := b.AppendNewBlock("split", nil).Body()
		sb.SetAttributeValue("service", cty.StringVal(x.service))
		if x.subset != "" {
			sb.SetAttributeValue("subset", cty.StringVal(x.subset))
		}
		sb.SetAttributeValue("weight", cty.NumberIntVal(x.weight))
	}
}

// routes appends svc's routes to a virtual host (or grpc_service) body:
// its router's routes, then a catch-all to the service (through its
// splitter). grpc limits them to what gRPC's xDS client runs.
func (t *translator) routes(vh *hclwrite.Body, svc string, grpc bool) {
	if rt := t.e.Routers[svc]; rt != nil {
		t.used(&t.usedRouters, svc)
		for i, r := range rt.Routes {
			t.route(vh, svc, i, r, grpc)
		}
	}
	b := vh.AppendNewBlock("route", nil).Body()
	setAction(b, t.dest(svc, "", 0))
	t.chainOptOut(b)
	if timeout := t.startTimeout(svc); timeout > 0 {
		b.SetAttributeValue("timeout", cty.StringVal(timeout.String()))
	}
}

// startTimeout is the request timeout of svc's chain: Consul's xDS
// generation (agent/xds/routes.go, makeUpstreamRouteForDiscoveryChain)
// applies a resolver's RequestTimeout only when the chain starts at a
// resolver node, i.e. svc has neither a router nor a splitter, and then
// it is the timeout of the resolver the start node resolves to after its
// redirects (discoverychain/compile.go, getResolverNode). Routes a router
// or splitter makes (to svc or to other services) never get it.
func (t *translator) startTimeout(svc string) time.Duration {
	if t.e.Routers[svc] != nil || t.e.Splitters[svc] != nil {
		return 0
	}
	r := t.e.Resolvers[svc]
	for depth := 0; r != nil && localRedirect(r.Redirect) && depth < 8; depth++ {
		svc = cmp.Or(r.Redirect.Service, svc)
		r = t.e.Resolvers[svc]
	}
	if r == nil {
		return 0
	}
	return r.RequestTimeout
}

func (t *translator) route(vh *hclwrite.Body, svc string, i int, r api.ServiceRoute, grpc bool) {
	var m *api.ServiceRouteHTTPMatch
	if r.Match != nil {
		m = r.Match.HTTP
	}
	methods := []string{""}
	if m != nil && len(m.Methods) > 0 {
		if grpc {
			t.note(api.ServiceRouter, svc, "route %d: methods do not apply to gRPC (every call is a POST); dropped", i)
		} else {
			methods = m.Methods
		}
	}
	for _, method := range methods {
		b := vh.AppendNewBlock("route", nil).Body()
		if m != nil {
			t.match(b, svc, i, m, method, grpc)
		}
		d := r.Destination
		if d == nil {
			d = &api.ServiceRouteDestination{}
		}
		to := d.Service
		if to == "" {
			to = svc
		}
		if sp := otherSpace(d.Namespace, d.Partition); sp != "" {
			t.note(api.ServiceRouter, svc, "route %d: a destination in another namespace or partition (%s) is not translated; the route goes to the same-named service %q in the bridge's catalog instead", i, sp, to)
		}
		setAction(b, t.dest(to, d.ServiceSubset, 0))
		t.chainOptOut(b)
		// Only the destination's own timeout: Consul gives the resolver's
		// request_timeout to no route a router makes (startTimeout).
		if d.RequestTimeout > 0 {
			b.SetAttributeValue("timeout", cty.StringVal(d.RequestTimeout.String()))
		}
		if d.IdleTimeout > 0 {
			if grpc {
				t.note(api.ServiceRouter, svc, "route %d: idle_timeout does not apply to gRPC (its xDS client has no per-route idle timeout); dropped", i)
			} else {
				b.SetAttributeValue("idle_timeout", cty.StringVal(d.IdleTimeout.String()))
			}
		}
		t.retry(b, svc, i, d, grpc)
		if d.PrefixRewrite != "" {
			if grpc {
				t.note(api.ServiceRouter, svc, "route %d: prefix_rewrite does not apply to gRPC; dropped", i)
			} else {
				b.AppendNewBlock("rewrite", nil).Body().SetAttributeValue("prefix", cty.StringVal(d.PrefixRewrite))
			}
		}
		if !grpc {
			headers(b, "request_headers", d.RequestHeaders)
			headers(b, "response_headers", d.ResponseHeaders)
		} else if d.RequestHeaders != nil || d.ResponseHeaders != nil {
			t.note(api.ServiceRouter, svc, "route %d: header changes do not apply to gRPC; dropped", i)
		}
	}
}

func (t *translator) match(b *hclwrite.Body, svc string, i int, m *api.ServiceRouteHTTPMatch, method string, grpc bool) {
	mb := b.AppendNewBlock("match", nil).Body()
	switch {
	case m.PathExact != "":
		mb.SetAttributeValue("path", cty.StringVal(m.PathExact))
	case m.PathPrefix != "":
		mb.SetAttributeValue("path_prefix", cty.StringVal(m.PathPrefix))
	case m.PathRegex != "":
		mb.SetAttributeValue("path_regex", cty.StringVal(m.PathRegex))
	}
	if m.CaseInsensitive {
		mb.SetAttributeValue("case_sensitive", cty.False)
	}
	if method != "" {
		mb.SetAttributeValue("method", cty.StringVal(strings.ToUpper(method)))
	}
	for _, h := range m.Header {
		hb := mb.AppendNewBlock("header", []string{h.Name}).Body()
		switch {
		case h.Present:
			hb.SetAttributeValue("present", cty.True)
		case h.Exact != "":
			hb.SetAttributeValue("exact", cty.StringVal(h.Exact))
		case h.Prefix != "":
			hb.SetAttributeValue("prefix", cty.StringVal(h.Prefix))
		case h.Suffix != "":
			hb.SetAttributeValue("regex", cty.StringVal(".*"+regexp.QuoteMeta(h.Suffix)))
		case h.Regex != "":
			hb.SetAttributeValue("regex", cty.StringVal(h.Regex))
		default:
			hb.SetAttributeValue("present", cty.True)
		}
		if h.Invert {
			hb.SetAttributeValue("invert", cty.True)
		}
	}
	for _, q := range m.QueryParam {
		if grpc {
			t.note(api.ServiceRouter, svc, "route %d: query parameters do not apply to gRPC; dropped", i)
			break
		}
		qb := mb.AppendNewBlock("query", []string{q.Name}).Body()
		switch {
		case q.Exact != "":
			qb.SetAttributeValue("exact", cty.StringVal(q.Exact))
		case q.Regex != "":
			qb.SetAttributeValue("regex", cty.StringVal(q.Regex))
		default:
			qb.SetAttributeValue("present", cty.True)
		}
	}
}

// grpcRetryOn are the retry conditions gRPC's xDS client runs, gRPC
// status codes: the same list the policy holds grpc_service routes to.
var grpcRetryOn = []string{"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}

// retry writes a destination's retries as Consul 1.15 makes them
// (agent/xds/routes.go, getRetryPolicyForDestination): retry_on is
// RetryOn, then connect-failure for RetryOnConnectFailure (once), then
// retriable-status-codes with RetryOnStatusCodes; NumRetries is only the
// count. With no condition retry_on is empty and Envoy retries nothing,
// so no retry is written: the policy's retry block without `on` would
// retry on 5xx, connect-failure and reset. Status codes have no
// equivalent in the retry block, so they are noted and left out rather
// than widened to 5xx. gRPC's xDS client retries on status codes only.
func (t *translator) retry(b *hclwrite.Body, svc string, i int, d *api.ServiceRouteDestination, grpc bool) {
	var on, dropped []string
	for _, o := range d.RetryOn {
		if grpc && !slices.Contains(grpcRetryOn, o) {
			dropped = append(dropped, o)
			continue
		}
		on = append(on, o)
	}
	if len(dropped) > 0 {
		t.note(api.ServiceRouter, svc, "route %d: retry_on %q: gRPC's xDS client retries only on status codes (%s); dropped", i, dropped, strings.Join(grpcRetryOn, ", "))
	}
	if d.RetryOnConnectFailure {
		switch {
		case grpc:
			t.note(api.ServiceRouter, svc, "route %d: retry_on_connect_failure: gRPC's xDS client retries only on status codes; dropped", i)
		case !slices.Contains(on, "connect-failure"):
			on = append(on, "connect-failure")
		}
	}
	if len(d.RetryOnStatusCodes) > 0 {
		t.note(api.ServiceRouter, svc, "route %d: retry_on_status_codes %v is not translated (the policy's retry cannot name status codes); no retry on them is set", i, d.RetryOnStatusCodes)
	}
	if len(on) == 0 {
		if d.NumRetries > 0 && len(d.RetryOn) == 0 && !d.RetryOnConnectFailure && len(d.RetryOnStatusCodes) == 0 {
			t.note(api.ServiceRouter, svc, "route %d: num_retries %d without retry_on, retry_on_connect_failure or retry_on_status_codes retries nothing in Consul either (Envoy's retry_on is empty); no retry is set", i, d.NumRetries)
		}
		return
	}
	rb := b.AppendNewBlock("retry", nil).Body()
	if d.NumRetries > 0 {
		rb.SetAttributeValue("attempts", cty.NumberIntVal(int64(d.NumRetries)))
	}
	rb.SetAttributeValue("on", strList(on))
}

func headers(b *hclwrite.Body, name string, h *api.HTTPHeaderModifiers) {
	if headersZero(h) {
		return
	}
	hb := b.AppendNewBlock(name, nil).Body()
	obj := func(m map[string]string) cty.Value {
		vs := map[string]cty.Value{}
		for k, v := range m {
			vs[k] = cty.StringVal(v)
		}
		return cty.ObjectVal(vs)
	}
	if len(h.Add) > 0 {
		hb.SetAttributeValue("add", obj(h.Add))
	}
	if len(h.Set) > 0 {
		hb.SetAttributeValue("set", obj(h.Set))
	}
	if len(h.Remove) > 0 {
		hb.SetAttributeValue("remove", strList(h.Remove))
	}
}

// ingressDoc is an ingress gateway as a proxy group of the same name: a
// listener per ingress listener, a virtual host per service with its
// hosts (Consul's default "<service>.ingress.*"), routed by its router
// and splitter. nil when no listener is left to serve: a proxy group
// without listeners is no group, and the gateway's proxies get none.
func (t *translator) ingressDoc(g *api.IngressGatewayConfigEntry) *Document {
	f := hclwrite.NewEmptyFile()
	p := f.Body().AppendNewBlock("proxy", []string{g.Name}).Body()
	if g.Defaults != nil {
		t.note(api.IngressGateway, g.Name, "defaults (upstream limits) are not translated; set circuit_breaker on the services")
	}
	for _, l := range g.Listeners {
		// Consul serves such a listener with TLS: the gateway's Connect
		// leaf or an SDS certificate, neither of which the entry carries
		// for a proxy of ours. Served in plain text it would answer the
		// clients Consul refuses, so it is not served at all (as a JWT
		// requirement answers 403).
		if why := ingressTLS(g.TLS, l.TLS); why != "" {
			t.note(api.IngressGateway, g.Name, "listener %d: Consul serves it with TLS (%s), which the bridge cannot serve from the entry, so it is not served rather than serve plain text; write this gateway as a proxy group in the policy, this listener with a tls block naming the certificate files, and delete the entry", l.Port, why)
			continue
		}
		lblock := p.AppendNewBlock("listener", []string{fmt.Sprintf("port-%d", l.Port)})
		lb := lblock.Body()
		lb.SetAttributeValue("port", cty.NumberIntVal(int64(l.Port)))
		proto := strings.ToLower(l.Protocol)
		if proto == "" || proto == "tcp" {
			lb.SetAttributeValue("protocol", cty.StringVal("tcp"))
			if len(l.Services) != 1 || l.Services[0].Name == "*" {
				t.note(api.IngressGateway, g.Name, "tcp listener on port %d needs exactly one named service; left without a target", l.Port)
				continue
			}
			t.ingressService(g.Name, l.Port, l.Services[0])
			setAction(lb, t.dest(l.Services[0].Name, "", 0))
			continue
		}
		vhosts := 0
		for _, s := range l.Services {
			if s.Name == "*" {
				t.note(api.IngressGateway, g.Name, "listener %d: the wildcard service is not translated; list the services", l.Port)
				continue
			}
			// Consul serves a service with its own SDS certificate on a
			// TLS filter chain of its own (by SNI), and its hosts are not
			// in the listener's plain-text routes.
			if s.TLS != nil && s.TLS.SDS != nil && s.TLS.SDS.CertResource != "" {
				t.note(api.IngressGateway, g.Name, "listener %d: service %q: Consul serves it with TLS only (its SDS certificate %q), which the bridge cannot serve from the entry, so its hosts are not served rather than serve plain text; write the gateway in the policy with a certificate for them and delete the entry", l.Port, s.Name, s.TLS.SDS.CertResource)
				continue
			}
			t.ingressService(g.Name, l.Port, s)
			vhosts++
			vh := lb.AppendNewBlock("virtual_host", []string{label(s.Name)}).Body()
			hosts := s.Hosts
			if len(hosts) == 0 {
				hosts = []string{s.Name + ".ingress.*"} // Consul's default
			}
			// Consul also lists each host with the listener's port (a
			// client on a port other than 80 and 443 sends it); the
			// bridge's listeners strip any port before matching
			// (strip_any_host_port), so the host alone answers it
			// (TestIngressDomainsMatchConsulXDS).
			vh.SetAttributeValue("domains", strList(hosts))
			t.expanded = true
			t.routes(vh, s.Name, false)
			t.expanded = false
		}
		if vhosts == 0 {
			p.RemoveBlock(lblock)
			t.note(api.IngressGateway, g.Name, "listener %d: no service of it is served, so neither is the listener", l.Port)
		}
	}
	if len(p.Blocks()) == 0 {
		t.note(api.IngressGateway, g.Name, "no listener of the gateway is served, so its proxies get none")
		return nil
	}
	d := render(f, api.IngressGateway+"/"+g.Name)
	return &d
}

// ingressTLS says why Consul serves an ingress listener with TLS, "" if
// it does not (Consul's listeners_ingress.go): TLS enabled on the gateway
// or the listener (a listener cannot turn the gateway's off), or an SDS
// certificate of the gateway's or the listener's.
func ingressTLS(gw api.GatewayTLSConfig, l *api.GatewayTLSConfig) string {
	switch {
	case gw.Enabled:
		return "enabled on the gateway"
	case l != nil && l.Enabled:
		return "enabled on the listener"
	case gw.SDS != nil && gw.SDS.CertResource != "":
		return fmt.Sprintf("the gateway's SDS certificate %q", gw.SDS.CertResource)
	case l != nil && l.SDS != nil && l.SDS.CertResource != "":
		return fmt.Sprintf("the listener's SDS certificate %q", l.SDS.CertResource)
	}
	return ""
}

// ingressService notes what of an ingress gateway's service the
// listener does not carry: Consul routes to the service in its namespace
// and partition, serves its SDS certificate, sets its header changes on
// its virtual host (routes.go, injectHeaderManipToVirtualHost) and its
// limits and passive health check on the gateway's own cluster of it. The
// policy's virtual_host has no header changes, and a service block's
// circuit_breaker and outlier_detection would apply to every caller.
func (t *translator) ingressService(gw string, port int, s api.IngressService) {
	if sp := otherSpace(s.Namespace, s.Partition); sp != "" {
		t.note(api.IngressGateway, gw, "listener %d: service %q in another namespace or partition (%s) is not translated; the listener routes to the same-named service in the bridge's catalog instead", port, s.Name, sp)
	}
	if !headersZero(s.RequestHeaders) || !headersZero(s.ResponseHeaders) {
		t.note(api.IngressGateway, gw, "listener %d: service %q: request_headers and response_headers (Consul sets them on the virtual host) are not translated; set them on the virtual host's routes", port, s.Name)
	}
	var limits []string
	for _, l := range []struct {
		set  bool
		name string
	}{
		{s.MaxConnections != nil, "max_connections"},
		{s.MaxPendingRequests != nil, "max_pending_requests"},
		{s.MaxConcurrentRequests != nil, "max_concurrent_requests"},
		{s.PassiveHealthCheck != nil, "passive_health_check"},
	} {
		if l.set {
			limits = append(limits, l.name)
		}
	}
	if len(limits) > 0 {
		t.note(api.IngressGateway, gw, "listener %d: service %q: upstream limits (%s) are not translated; set circuit_breaker or outlier_detection on the service (they then apply to every caller of it, not only the gateway)", port, s.Name, strings.Join(limits, ", "))
	}
}

func headersZero(h *api.HTTPHeaderModifiers) bool {
	return h == nil || (len(h.Add) == 0 && len(h.Set) == 0 && len(h.Remove) == 0)
}

// routeDocs are the documents of the services with a router or
// splitter that the bridge serves besides gateways: a gRPC service's
// grpc_service block (proxyless clients), and with the mesh an HTTP
// service's mesh_routes (Connect sidecars' upstreams), in one document per
// service named after its entries.
func (t *translator) routeDocs() []Document {
	var out []Document
	names := map[string]bool{}
	for n := range t.e.Routers {
		names[n] = true
	}
	for n := range t.e.Splitters {
		names[n] = true
	}
	// A resolver's default subset is where the chain sends the service's
	// traffic even without a router or splitter.
	for n, r := range t.e.Resolvers {
		if r.DefaultSubset != "" || localRedirect(r.Redirect) || (r.RequestTimeout > 0 && t.hasChain(n)) {
			names[n] = true
		}
	}
	for _, svc := range slices.Sorted(maps.Keys(names)) {
		l7 := t.hasChain(svc)
		// A TCP service's chain is its resolver alone (Consul applies
		// routers and splitters to HTTP only): its sidecars' upstreams
		// still go to the default subset or redirect target.
		if !l7 && !(t.e.Mesh && t.e.Routers[svc] == nil && t.e.Splitters[svc] == nil) {
			continue
		}
		grpc := t.protocol(svc) == "grpc" // only a service-defaults entry says grpc
		mesh := t.e.Mesh
		f := hclwrite.NewEmptyFile()
		// The chain itself, which proxy listener routes to svc follow
		// (Consul applies it wherever svc is a target).
		if l7 {
			t.mesh = true
			t.routes(f.Body().AppendNewBlock("chain", []string{svc}).Body(), svc, false)
			t.mesh = false
		}
		if grpc {
			t.routes(f.Body().AppendNewBlock("grpc_service", []string{svc}).Body(), svc, true)
		}
		if mesh {
			t.mesh = true
			t.routes(f.Body().AppendNewBlock("mesh_routes", []string{svc}).Body(), svc, false)
			t.mesh = false
		}
		var from []string
		if t.e.Routers[svc] == nil && t.e.Splitters[svc] == nil {
			from = append(from, api.ServiceResolver+"/"+svc+"#chain")
		}
		if t.e.Routers[svc] != nil {
			from = append(from, api.ServiceRouter+"/"+svc)
		}
		if t.e.Splitters[svc] != nil {
			from = append(from, api.ServiceSplitter+"/"+svc)
		}
		out = append(out, render(f, from...))
	}
	return out
}

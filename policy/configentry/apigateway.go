package configentry

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

var nonName = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// apiGatewayDoc is an api-gateway with the http-route and tcp-route
// entries attached to it, as a proxy group of the same name: a listener
// per gateway listener; on http listeners a virtual host per set of
// hostnames (routes with the same hostnames share one, as in Consul),
// with each rule's matches as routes. A route's hostnames are those the
// listener's hostname admits (Consul's FilteredHostnames); a route none
// of whose hostnames it admits is not served on that listener.
func (t *translator) apiGatewayDoc(g *api.APIGatewayConfigEntry) *Document {
	f := hclwrite.NewEmptyFile()
	p := f.Body().AppendNewBlock("proxy", []string{g.Name}).Body()
	from := []string{api.APIGateway + "/" + g.Name}
	attached := func(parents []api.ResourceReference, listener string) bool {
		return slices.ContainsFunc(parents, func(r api.ResourceReference) bool {
			return (r.Kind == "" || r.Kind == api.APIGateway) && r.Name == g.Name && (r.SectionName == "" || r.SectionName == listener)
		})
	}
	t.apiGatewayNotes(g)
	for _, l := range g.Listeners {
		// Consul serves a listener with certificates with TLS; the
		// bridge cannot serve them from the entries, and in plain text
		// it would answer the clients Consul refuses (as ingressDoc).
		if why := apiGatewayTLS(l.TLS); why != "" {
			t.note(api.APIGateway, g.Name, "listener %q: Consul serves it with TLS (%s), which the bridge cannot serve from the entries, so it is not served rather than serve plain text; write this gateway as a proxy group in the policy, this listener with a tls block naming the certificate files, and delete the entry", l.Name, why)
			continue
		}
		t.listenerNotes(g.Name, l)
		lblock := p.AppendNewBlock("listener", []string{nonName.ReplaceAllString(l.Name, "-")})
		lb := lblock.Body()
		lb.SetAttributeValue("port", cty.NumberIntVal(int64(l.Port)))
		if strings.ToLower(l.Protocol) == "tcp" {
			lb.SetAttributeValue("protocol", cty.StringVal("tcp"))
			var svcs []string
			for _, name := range sortedKeys(t.e.TCPRoutes) {
				r := t.e.TCPRoutes[name]
				if attached(r.Parents, l.Name) {
					from = append(from, api.TCPRoute+"/"+name)
					t.parentNotes(api.TCPRoute, name, g.Name, r.Parents)
					for _, s := range r.Services {
						svcs = append(svcs, s.Name)
						t.tcpServiceNotes(name, s)
					}
				}
			}
			if len(svcs) != 1 {
				p.RemoveBlock(lblock)
				t.note(api.APIGateway, g.Name, "tcp listener %q has %d services attached by tcp-route entries; it needs exactly one, so it is not served", l.Name, len(svcs))
				continue
			}
			setAction(lb, t.dest(svcs[0], "", 0))
			continue
		}
		// A JWT requirement of the listener (Default or Override) applies
		// to every route on it; the bridge cannot check it, so they fail
		// closed.
		listenerJWT := jwtRequired(l.Default) || jwtRequired(l.Override)
		if listenerJWT {
			t.note(api.APIGateway, g.Name, "listener %q: its JWT requirement (Default/Override JWT) is not translated, so every route on it answers 403 rather than pass requests unchecked; express it in the policy (a jwt_provider on the listener and jwt blocks on its routes or virtual hosts) and drop it from the entry, or serve this gateway with Consul", l.Name)
		}
		byHosts := map[string]*hclwrite.Body{}
		for _, name := range sortedKeys(t.e.HTTPRoutes) {
			r := t.e.HTTPRoutes[name]
			if !attached(r.Parents, l.Name) {
				continue
			}
			hosts, dropped := filteredHostnames(l.Hostname, r.Hostnames)
			for _, h := range dropped {
				t.note(api.HTTPRoute, name, "hostname %q is not admitted by listener %q of api-gateway %q (hostname %q), so it is not served there, as in Consul", h, l.Name, g.Name, l.Hostname)
			}
			if len(hosts) == 0 {
				t.note(api.HTTPRoute, name, "none of its hostnames is admitted by listener %q of api-gateway %q (hostname %q): the route is not served on that listener, as in Consul", l.Name, g.Name, l.Hostname)
				continue
			}
			from = append(from, api.HTTPRoute+"/"+name)
			t.parentNotes(api.HTTPRoute, name, g.Name, r.Parents)
			slices.Sort(hosts)
			key := strings.Join(hosts, ",")
			vh := byHosts[key]
			if vh == nil {
				vh = lb.AppendNewBlock("virtual_host", []string{nonName.ReplaceAllString(name, "-")}).Body()
				vh.SetAttributeValue("domains", strList(hosts))
				byHosts[key] = vh
			}
			t.httpRoute(vh, r, listenerJWT)
		}
		if len(byHosts) == 0 {
			// Consul serves only listeners with routes bound (its xDS
			// "ready listeners"); one without is not a listener here
			// either, rather than an invalid one that rejects the gateway.
			p.RemoveBlock(lblock)
			t.note(api.APIGateway, g.Name, "http listener %q has no http-route entry attached whose hostnames it admits; it is not served, as in Consul", l.Name)
		}
	}
	if len(p.Blocks()) == 0 {
		t.note(api.APIGateway, g.Name, "no listener of the gateway is served, so its proxies get none")
		return nil
	}
	d := render(f, from...)
	return &d
}

// apiGatewayTLS says why Consul serves an api-gateway listener with TLS,
// "" if it does not: certificates (inline-certificate or
// file-system-certificate entries) or an SDS certificate.
func apiGatewayTLS(tls api.APIGatewayTLSConfiguration) string {
	switch {
	case len(tls.Certificates) > 0:
		names := make([]string, 0, len(tls.Certificates))
		for _, c := range tls.Certificates {
			names = append(names, c.Kind+"/"+c.Name)
		}
		return "certificates " + strings.Join(names, ", ")
	case tls.SDS != nil && tls.SDS.CertResource != "":
		return fmt.Sprintf("the SDS certificate %q", tls.SDS.CertResource)
	}
	return ""
}

// apiGatewayNotes notes the gateway's settings that apply to all its
// listeners and have no equivalent in the proxy group.
func (t *translator) apiGatewayNotes(g *api.APIGatewayConfigEntry) {
	if tls := g.TLS; tls.Enabled || tls.SDS != nil || tls.TLSMinVersion != "" || tls.TLSMaxVersion != "" || len(tls.CipherSuites) > 0 {
		t.note(api.APIGateway, g.Name, "gateway TLS defaults are not translated; add a tls block to the listeners with the certificate files and versions")
	}
	if g.Defaults != nil {
		t.note(api.APIGateway, g.Name, "defaults (upstream limits) are not translated; set circuit_breaker on the services")
	}
	if g.ExtAuthz != nil {
		t.note(api.APIGateway, g.Name, "the gateway-wide ext_authz toggle is not translated (it configures the builtin/ext-authz Envoy extension, which the bridge does not translate); use the listener's ext_authz block in the policy")
	}
}

// listenerNotes notes a listener's settings the proxy group's listener
// does not carry.
func (t *translator) listenerNotes(gw string, l api.APIGatewayListener) {
	tls := l.TLS // certificates or SDS: not served (apiGatewayDoc)
	if tls.MinVersion != "" || tls.MaxVersion != "" || len(tls.CipherSuites) > 0 {
		t.note(api.APIGateway, gw, "listener %q: TLS min_version, max_version and cipher_suites are not translated; set them in the listener's tls block", l.Name)
	}
	if l.MaxRequestHeadersKB != nil {
		t.note(api.APIGateway, gw, "listener %q: MaxRequestHeadersKB %d is not translated; Envoy's default limit applies", l.Name, *l.MaxRequestHeadersKB)
	}
}

// jwtRequired reports whether a listener policy requires a JWT.
func jwtRequired(p *api.APIGatewayPolicy) bool {
	return p != nil && p.JWT != nil && len(p.JWT.Providers) > 0
}

// filteredHostnames are the route hostnames a listener's hostname admits,
// as Consul's HTTPRouteConfigEntry.FilteredHostnames (agent/structs/
// config_entry_routes.go) computes them: a listener without a hostname is
// "*"; a route without hostnames takes the listener's; a listener hostname
// with a "*" admits every route hostname ending in what follows "*." (so
// "*" admits all); any other admits itself only. dropped are the route
// hostnames it does not admit.
func filteredHostnames(listener string, route []string) (kept, dropped []string) {
	if listener == "" {
		listener = "*"
	}
	if len(route) == 0 {
		return []string{listener}, nil
	}
	wildcard := strings.ContainsRune(listener, '*')
	suffix := strings.TrimPrefix(strings.TrimPrefix(listener, "*"), ".")
	for _, h := range route {
		if (wildcard && strings.HasSuffix(h, suffix)) || (!wildcard && h == listener) {
			kept = append(kept, h)
		} else {
			dropped = append(dropped, h)
		}
	}
	return kept, dropped
}

// parentNotes notes a parent reference to this gateway in a namespace or
// partition: Consul binds such a route to that namespace's gateway.
func (t *translator) parentNotes(kind, route, gw string, parents []api.ResourceReference) {
	for _, p := range parents {
		if sp := otherSpace(p.Namespace, p.Partition); (p.Kind == "" || p.Kind == api.APIGateway) && p.Name == gw && sp != "" {
			t.note(kind, route, "parent %q in %s: Consul binds the route to the gateway there; the bridge attaches it to the api-gateway %q it reads", gw, sp, gw)
		}
	}
}

func (t *translator) tcpServiceNotes(route string, s api.TCPService) {
	if sp := otherSpace(s.Namespace, s.Partition); sp != "" {
		t.note(api.TCPRoute, route, "service %q in %s is not translated: Consul routes to the service there; the bridge routes to the same-named service %q it reads", s.Name, sp, s.Name)
	}
	if s.Limits != nil {
		t.note(api.TCPRoute, route, "service %q: Limits (upstream limits) are not translated; set circuit_breaker on the service", s.Name)
	}
	if s.TLS != nil {
		t.note(api.TCPRoute, route, "service %q: TLS from SDS is not translated", s.Name)
	}
}

// httpServiceNotes notes what a rule's service sets that a route to it
// cannot carry, once per rule and service; jwt reports whether the
// service requires a JWT.
func (t *translator) httpServiceNotes(route string, i int, s api.HTTPService) (jwt bool) {
	var fields []string
	for _, x := range []struct {
		set  bool
		name string
	}{
		{len(s.Filters.Headers) > 0, "Headers"},
		{s.Filters.URLRewrite != nil, "URLRewrite"},
		{s.Filters.RetryFilter != nil, "RetryFilter"},
		{s.Filters.TimeoutFilter != nil, "TimeoutFilter"},
		{len(s.ResponseFilters.Headers) > 0, "ResponseFilters.Headers"},
	} {
		if x.set {
			fields = append(fields, x.name)
		}
	}
	if len(fields) > 0 {
		t.note(api.HTTPRoute, route, "rule %d: filters per service are not translated (%s of service %q); put them on the rule", i, strings.Join(fields, ", "), s.Name)
	}
	if s.Filters.ExtAuthz != nil || len(s.Filters.ExtProc) > 0 {
		t.note(api.HTTPRoute, route, "rule %d: ext_authz and ext_proc filters of service %q are not translated (they configure the builtin/ext-authz and ext-proc Envoy extensions, which the bridge does not translate)", i, s.Name)
	}
	if sp := otherSpace(s.Namespace, s.Partition); sp != "" {
		t.note(api.HTTPRoute, route, "rule %d: service %q in %s is not translated: Consul routes to the service there; the bridge routes to the same-named service %q it reads", i, s.Name, sp, s.Name)
	}
	if s.Limits != nil {
		t.note(api.HTTPRoute, route, "rule %d: Limits (upstream limits) of service %q are not translated; set circuit_breaker on the service", i, s.Name)
	}
	if s.TLS != nil {
		t.note(api.HTTPRoute, route, "rule %d: TLS from SDS of service %q is not translated", i, s.Name)
	}
	return s.Filters.JWT != nil && len(s.Filters.JWT.Providers) > 0
}

// httpRoute appends a route's rules to a virtual host. listenerJWT: the
// listener requires a JWT, so every route answers 403.
func (t *translator) httpRoute(vh *hclwrite.Body, r *api.HTTPRouteConfigEntry, listenerJWT bool) {
	for i, rule := range r.Rules {
		matches := rule.Matches
		if len(matches) == 0 {
			matches = []api.HTTPMatch{{}}
		}
		// A JWT the bridge cannot check fails closed: the rule's routes
		// answer 403 rather than pass requests Consul would refuse. A
		// service's own requirement closes the whole rule, since a route
		// cannot require a token for some of its services only.
		deny := listenerJWT
		if rule.Filters.JWT != nil && len(rule.Filters.JWT.Providers) > 0 {
			deny = true
			t.note(api.HTTPRoute, r.Name, "rule %d: its JWT requirement is not translated, so its routes answer 403 rather than pass requests unchecked; express it in the policy (a jwt_provider on the listener, a jwt block on the route) and drop it from the entry, or serve the gateway with Consul", i)
		}
		if rule.Filters.ExtAuthz != nil || len(rule.Filters.ExtProc) > 0 {
			t.note(api.HTTPRoute, r.Name, "rule %d: ext_authz and ext_proc filters are not translated (they configure the builtin/ext-authz and ext-proc Envoy extensions, which the bridge does not translate)", i)
		}
		for _, s := range rule.Services {
			if t.httpServiceNotes(r.Name, i, s) {
				deny = true
				t.note(api.HTTPRoute, r.Name, "rule %d: the JWT requirement of service %q is not translated, and a route cannot require a token for some of its services only, so the rule's routes answer 403 rather than pass requests unchecked; express it in the policy (a jwt_provider on the listener, a jwt block on the route) and drop it from the entry, or serve the gateway with Consul", i, s.Name)
			}
		}
		for _, m := range matches {
			b := vh.AppendNewBlock("route", nil).Body()
			t.httpMatch(b, m)
			if deny {
				b.AppendNewBlock("direct_response", nil).Body().SetAttributeValue("status", cty.NumberIntVal(403))
				continue
			}
			var ts []target
			for _, s := range rule.Services {
				// The service's chain block (router, splitter, resolver)
				// applies to the route in the policy; without one, its
				// resolver's default subset or redirect, as Consul's chain.
				x := target{service: label(s.Name), weight: 1}
				if !t.hasChain(s.Name) {
					x = t.leaf(s.Name, "", 0)
				}
				x.weight = int64(max(s.Weight, 1))
				ts = append(ts, x)
			}
			if len(ts) == 0 {
				t.note(api.HTTPRoute, r.Name, "rule %d names no service; its routes answer 503", i)
				b.AppendNewBlock("direct_response", nil).Body().SetAttributeValue("status", cty.NumberIntVal(503))
				continue
			}
			setAction(b, ts)
			if tf := rule.Filters.TimeoutFilter; tf != nil {
				if tf.RequestTimeout > 0 {
					b.SetAttributeValue("timeout", cty.StringVal(tf.RequestTimeout.String()))
				}
				if tf.IdleTimeout > 0 {
					b.SetAttributeValue("idle_timeout", cty.StringVal(tf.IdleTimeout.String()))
				}
			}
			if rf := rule.Filters.RetryFilter; rf != nil {
				t.ruleRetry(b, r.Name, i, rf)
			}
			if u := rule.Filters.URLRewrite; u != nil && u.Path != "" {
				b.AppendNewBlock("rewrite", nil).Body().SetAttributeValue("prefix", cty.StringVal(u.Path))
			}
			headers(b, "request_headers", mergeHeaderFilters(rule.Filters.Headers))
			headers(b, "response_headers", mergeHeaderFilters(rule.ResponseFilters.Headers))
		}
	}
}

// ruleRetry writes a rule's RetryFilter with the service-router's retry,
// and files the notes it makes under the http-route ("rule N"), not
// under a service-router of the route's name.
func (t *translator) ruleRetry(b *hclwrite.Body, route string, i int, rf *api.RetryFilter) {
	n := len(t.notes)
	t.retry(b, route, i, &api.ServiceRouteDestination{NumRetries: rf.NumRetries, RetryOn: rf.RetryOn,
		RetryOnStatusCodes: rf.RetryOnStatusCodes, RetryOnConnectFailure: rf.RetryOnConnectFailure}, false)
	for j := n; j < len(t.notes); j++ {
		if t.notes[j].Entry == api.ServiceRouter+"/"+route {
			t.notes[j].Entry = api.HTTPRoute + "/" + route
			t.notes[j].Text = strings.Replace(t.notes[j].Text, fmt.Sprintf("route %d:", i), fmt.Sprintf("rule %d:", i), 1)
		}
	}
}

// mergeHeaderFilters joins a rule's header filters into one change, as
// Consul's httpRouteFiltersToServiceRouteHeaderModifier does: Add and Set
// merged in order (a later filter's value for a header wins), Remove
// accumulated (here without repeats).
func mergeHeaderFilters(fs []api.HTTPHeaderFilter) *api.HTTPHeaderModifiers {
	if len(fs) == 0 {
		return nil
	}
	m := &api.HTTPHeaderModifiers{Add: map[string]string{}, Set: map[string]string{}}
	for _, f := range fs {
		maps.Copy(m.Add, f.Add)
		maps.Copy(m.Set, f.Set)
		for _, h := range f.Remove {
			if !slices.Contains(m.Remove, h) {
				m.Remove = append(m.Remove, h)
			}
		}
	}
	return m
}

func (t *translator) httpMatch(b *hclwrite.Body, m api.HTTPMatch) {
	if m.Path.Value == "" && m.Method == "" && len(m.Headers) == 0 && len(m.Query) == 0 {
		return
	}
	mb := b.AppendNewBlock("match", nil).Body()
	switch m.Path.Match {
	case api.HTTPPathMatchExact:
		mb.SetAttributeValue("path", cty.StringVal(m.Path.Value))
	case api.HTTPPathMatchRegularExpression:
		mb.SetAttributeValue("path_regex", cty.StringVal(m.Path.Value))
	case api.HTTPPathMatchPrefix, "":
		if m.Path.Value != "" {
			mb.SetAttributeValue("path_prefix", cty.StringVal(m.Path.Value))
		}
	}
	if m.Method != "" {
		mb.SetAttributeValue("method", cty.StringVal(string(m.Method)))
	}
	for _, h := range m.Headers {
		hb := mb.AppendNewBlock("header", []string{h.Name}).Body()
		switch h.Match {
		case api.HTTPHeaderMatchExact:
			hb.SetAttributeValue("exact", cty.StringVal(h.Value))
		case api.HTTPHeaderMatchPrefix:
			hb.SetAttributeValue("prefix", cty.StringVal(h.Value))
		case api.HTTPHeaderMatchSuffix:
			hb.SetAttributeValue("regex", cty.StringVal(".*"+regexp.QuoteMeta(h.Value)))
		case api.HTTPHeaderMatchRegularExpression:
			hb.SetAttributeValue("regex", cty.StringVal(h.Value))
		default:
			hb.SetAttributeValue("present", cty.True)
		}
		if h.Invert {
			hb.SetAttributeValue("invert", cty.True)
		}
	}
	for _, q := range m.Query {
		qb := mb.AppendNewBlock("query", []string{q.Name}).Body()
		switch q.Match {
		case api.HTTPQueryMatchExact:
			qb.SetAttributeValue("exact", cty.StringVal(q.Value))
		case api.HTTPQueryMatchRegularExpression:
			qb.SetAttributeValue("regex", cty.StringVal(q.Value))
		default:
			qb.SetAttributeValue("present", cty.True)
		}
	}
}

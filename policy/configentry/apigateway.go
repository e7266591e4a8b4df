package configentry

import (
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
// with each rule's matches as routes.
func (t *translator) apiGatewayDoc(g *api.APIGatewayConfigEntry) Document {
	f := hclwrite.NewEmptyFile()
	p := f.Body().AppendNewBlock("proxy", []string{g.Name}).Body()
	from := []string{api.APIGateway + "/" + g.Name}
	attached := func(parents []api.ResourceReference, listener string) bool {
		return slices.ContainsFunc(parents, func(r api.ResourceReference) bool {
			return (r.Kind == "" || r.Kind == api.APIGateway) && r.Name == g.Name && (r.SectionName == "" || r.SectionName == listener)
		})
	}
	for _, l := range g.Listeners {
		if l.TLS.Certificates != nil {
			t.note(api.APIGateway, g.Name, "listener %q: TLS certificates are not translated; add a tls block with the certificate files", l.Name)
		}
		lb := p.AppendNewBlock("listener", []string{nonName.ReplaceAllString(l.Name, "-")}).Body()
		lb.SetAttributeValue("port", cty.NumberIntVal(int64(l.Port)))
		if strings.ToLower(l.Protocol) == "tcp" {
			lb.SetAttributeValue("protocol", cty.StringVal("tcp"))
			var svcs []string
			for _, name := range sortedKeys(t.e.TCPRoutes) {
				r := t.e.TCPRoutes[name]
				if attached(r.Parents, l.Name) {
					from = append(from, api.TCPRoute+"/"+name)
					for _, s := range r.Services {
						svcs = append(svcs, s.Name)
					}
				}
			}
			if len(svcs) != 1 {
				t.note(api.APIGateway, g.Name, "tcp listener %q has %d services attached by tcp-route entries; it needs exactly one", l.Name, len(svcs))
				continue
			}
			setAction(lb, t.dest(svcs[0], "", 0))
			continue
		}
		byHosts := map[string]*hclwrite.Body{}
		for _, name := range sortedKeys(t.e.HTTPRoutes) {
			r := t.e.HTTPRoutes[name]
			if !attached(r.Parents, l.Name) {
				continue
			}
			from = append(from, api.HTTPRoute+"/"+name)
			hosts := slices.Clone(r.Hostnames)
			if len(hosts) == 0 && l.Hostname != "" {
				hosts = []string{l.Hostname}
			}
			if len(hosts) == 0 {
				hosts = []string{"*"}
			}
			slices.Sort(hosts)
			key := strings.Join(hosts, ",")
			vh := byHosts[key]
			if vh == nil {
				vh = lb.AppendNewBlock("virtual_host", []string{nonName.ReplaceAllString(name, "-")}).Body()
				vh.SetAttributeValue("domains", strList(hosts))
				byHosts[key] = vh
			}
			t.httpRoute(vh, r)
		}
		if len(byHosts) == 0 {
			t.note(api.APIGateway, g.Name, "http listener %q has no http-route entry attached; it is left without routes", l.Name)
		}
	}
	return render(f, from...)
}

func (t *translator) httpRoute(vh *hclwrite.Body, r *api.HTTPRouteConfigEntry) {
	for i, rule := range r.Rules {
		matches := rule.Matches
		if len(matches) == 0 {
			matches = []api.HTTPMatch{{}}
		}
		if rule.Filters.JWT != nil || rule.Filters.ExtAuthz != nil || len(rule.Filters.ExtProc) > 0 {
			t.note(api.HTTPRoute, r.Name, "rule %d: JWT, ext_authz and ext_proc filters are not translated", i)
		}
		for _, m := range matches {
			b := vh.AppendNewBlock("route", nil).Body()
			t.httpMatch(b, m)
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
				if len(s.Filters.Headers) > 0 || s.Filters.URLRewrite != nil {
					t.note(api.HTTPRoute, r.Name, "rule %d: filters per service are not translated", i)
				}
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
				t.retry(b, r.Name, i, &api.ServiceRouteDestination{NumRetries: rf.NumRetries, RetryOn: rf.RetryOn,
					RetryOnStatusCodes: rf.RetryOnStatusCodes, RetryOnConnectFailure: rf.RetryOnConnectFailure}, false)
			}
			if u := rule.Filters.URLRewrite; u != nil && u.Path != "" {
				b.AppendNewBlock("rewrite", nil).Body().SetAttributeValue("prefix", cty.StringVal(u.Path))
			}
			for _, h := range rule.Filters.Headers {
				headers(b, "request_headers", &api.HTTPHeaderModifiers{Add: h.Add, Set: h.Set, Remove: h.Remove})
			}
			for _, h := range rule.ResponseFilters.Headers {
				headers(b, "response_headers", &api.HTTPHeaderModifiers{Add: h.Add, Set: h.Set, Remove: h.Remove})
			}
		}
	}
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

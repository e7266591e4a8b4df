package configentry

import (
	"cmp"
	"fmt"
	"regexp"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// label is the service block label of a Consul service: a cluster name may
// not contain ".", which separates subsets, so dots become "-" and the
// block names the Consul service with consul_service.
func label(svc string) string { return strings.ReplaceAll(svc, ".", "-") }

// serviceDoc is the service block of svc from its service-defaults and
// service-resolver entries.
func (t *translator) serviceDoc(svc string) *Document {
	f := hclwrite.NewEmptyFile()
	b := f.Body().AppendNewBlock("service", []string{label(svc)}).Body()
	var from []string
	if label(svc) != svc {
		b.SetAttributeValue("consul_service", cty.StringVal(svc))
	}
	if d := t.e.Defaults[svc]; d != nil {
		from = append(from, api.ServiceDefaults+"/"+svc)
		t.defaults(b, d)
	}
	if r := t.e.Resolvers[svc]; r != nil {
		from = append(from, api.ServiceResolver+"/"+svc)
		t.resolver(b, r)
	}
	d := render(f, from...)
	return &d
}

func (t *translator) defaults(b *hclwrite.Body, d *api.ServiceConfigEntry) {
	switch p := strings.ToLower(d.Protocol); p {
	case "http2", "grpc":
		b.SetAttributeValue("http2", cty.True)
	case "", "tcp", "http":
	default:
		t.note(api.ServiceDefaults, d.Name, "protocol %q has no equivalent; treated as tcp", d.Protocol)
	}
	for _, unsupported := range []struct {
		set  bool
		what string
	}{
		{d.MaxInboundConnections != 0, "max_inbound_connections"},
		{d.LocalConnectTimeoutMs != 0, "local_connect_timeout_ms"},
		{d.LocalRequestTimeoutMs != 0, "local_request_timeout_ms"},
		// With a mesh block the mesh reads it (consul.GatewayModes).
		{d.MeshGateway.Mode != "" && !t.e.Mesh, "mesh_gateway"},
		{len(d.Expose.Paths) > 0 || d.Expose.Checks, "expose"},
		// Consul returns "TransparentProxy": {} and "Mode": "" for an
		// entry that never set them: only a setting is a setting.
		{transparentProxySet(d), "transparent proxy mode"},
		{d.MutualTLSMode != "", "mutual_tls_mode"},
		{d.Destination != nil, "destination (terminating gateway)"},
		{d.RateLimits != nil, "rate_limits"},
		{len(d.EnvoyExtensions) > 0, "envoy_extensions"},
		{d.UpstreamConfig != nil && d.UpstreamConfig.Defaults != nil, "upstream_config.defaults (how this service's own sidecar reaches its upstreams)"},
		{d.BalanceInboundConnections != "", "balance_inbound_connections"},
		{d.MaxRequestHeadersKB != nil, "max_request_headers_kb"},
		{d.ExternalSNI != "", "external_sni"},
	} {
		if unsupported.set {
			t.note(api.ServiceDefaults, d.Name, "%s: service mesh setting, not translated", unsupported.what)
		}
	}
	t.upstreamOverrides(d)
}

// transparentProxySet reports whether d sets transparent proxy mode:
// Consul returns an empty TransparentProxy object (and Mode "") for every
// entry that does not.
func transparentProxySet(d *api.ServiceConfigEntry) bool {
	tp := d.TransparentProxy
	return (d.Mode != "" && d.Mode != api.ProxyModeDefault) || (tp != nil && (tp.OutboundListenerPort != 0 || tp.DialedDirectly))
}

// upstreamOverrides notes where d's upstream_config overrides apply. In
// Consul they are about d's own sidecars (how web's sidecar reaches api),
// not about the upstream: written into api's service block they would
// change what every caller of api gets. With the mesh the model applies
// them to d's sidecars' mesh cluster of the upstream only
// (consul.Mesh.UpstreamOverrides); without it the bridge serves no
// sidecar of d, so they apply nowhere.
func (t *translator) upstreamOverrides(d *api.ServiceConfigEntry) {
	if d.UpstreamConfig == nil {
		return
	}
	for _, o := range d.UpstreamConfig.Overrides {
		if o == nil {
			continue
		}
		if t.e.Mesh {
			t.note(api.ServiceDefaults, d.Name, "upstream_config.overrides for %q apply to %s's sidecars' mesh cluster of %s only, as in Consul (connect timeout, limits, passive health); other callers of %s keep its own settings", o.Name, d.Name, o.Name, o.Name)
		} else {
			t.note(api.ServiceDefaults, d.Name, "upstream_config.overrides for %q are about %s's sidecars (Consul applies them to no other caller); without a mesh block the bridge serves no sidecar, so they apply nowhere", o.Name, d.Name)
		}
	}
}

func (t *translator) resolver(b *hclwrite.Body, r *api.ServiceResolverConfigEntry) {
	if r.ConnectTimeout > 0 {
		b.SetAttributeValue("connect_timeout", cty.StringVal(r.ConnectTimeout.String()))
	}
	t.requestTimeout(r)
	if rd := r.Redirect; rd != nil {
		switch {
		case rd.Datacenter != "" && rd.Service == "" && rd.ServiceSubset == "" && rd.Peer == "" && rd.SamenessGroup == "" && otherSpace(rd.Namespace, rd.Partition) == "":
			b.SetAttributeValue("datacenter", cty.StringVal(rd.Datacenter))
		case !localRedirect(rd):
			t.note(api.ServiceResolver, r.Name, "redirect to another datacenter's service, a peer, a sameness group, namespace or partition is not translated; route to the target instead")
		case !t.hasChain(r.Name):
			// Only a chain block carries the redirect to routes in HCL,
			// and only an L7 service gets one (routeDocs); its service
			// block cannot say it.
			to := fmt.Sprintf("%q", cmp.Or(rd.Service, r.Name))
			if rd.ServiceSubset != "" {
				to += fmt.Sprintf(" subset %q", rd.ServiceSubset)
			}
			t.note(api.ServiceResolver, r.Name, "redirect to %s: the routes made from entries follow it; routes in HCL naming %s reach %s itself (a %s service has no chain block to carry it)", to, r.Name, r.Name, t.protocol(r.Name))
		}
	}
	if lb := r.LoadBalancer; lb != nil {
		t.loadBalancer(b, r.Name, lb)
	}
	passing := 0
	for _, name := range sortedKeys(r.Subsets) {
		if r.Subsets[name].OnlyPassing {
			passing++
		}
	}
	if passing > 0 {
		b.SetAttributeValue("only_passing", cty.True)
		if passing < len(r.Subsets) {
			t.note(api.ServiceResolver, r.Name, "only_passing is set on some subsets; the bridge applies it to the whole service")
		} else {
			// Consul applies it to the subsets' targets only: traffic to
			// the service without a subset, and failover to it, keeps
			// instances whose checks warn.
			t.note(api.ServiceResolver, r.Name, "only_passing is set on every subset; the bridge applies it to the whole service, so traffic to %s without a subset and failover to it also skip instances whose checks warn", r.Name)
		}
	}
	subsets := map[string]*hclwrite.Body{}
	for _, name := range sortedKeys(r.Subsets) {
		tags, meta, ok := parseFilter(r.Subsets[name].Filter)
		if !ok {
			t.note(api.ServiceResolver, r.Name, "subset %q: filter %q is not a conjunction of tag and meta equality tests; subset dropped", name, r.Subsets[name].Filter)
			continue
		}
		sb := b.AppendNewBlock("subset", []string{name}).Body()
		subsets[name] = sb
		if len(tags) > 0 {
			sb.SetAttributeValue("tags", strList(tags))
		}
		if len(meta) > 0 {
			m := map[string]cty.Value{}
			for k, v := range meta {
				m[k] = cty.StringVal(v)
			}
			sb.SetAttributeValue("meta", cty.ObjectVal(m))
		}
	}
	if r.DefaultSubset != "" {
		t.note(api.ServiceResolver, r.Name, "default_subset %q: the routes made from entries use it; routes in HCL naming the service without a subset reach every instance", r.DefaultSubset)
	}
	for _, key := range sortedKeys(r.Failover) {
		fb := b
		if key != "*" {
			if fb = subsets[key]; fb == nil {
				t.note(api.ServiceResolver, r.Name, "failover %q: no such subset is translated; failover dropped", key)
				continue
			}
		}
		t.failover(fb, r.Name, key, r.Failover[key])
	}
	if r.PrioritizeByLocality != nil {
		t.note(api.ServiceResolver, r.Name, "prioritize_by_locality is not translated")
	}
}

// requestTimeout notes where r's request_timeout applies: as in Consul,
// only to the chain of a service without a router or splitter whose start
// resolver is r (startTimeout).
func (t *translator) requestTimeout(r *api.ServiceResolverConfigEntry) {
	if r.RequestTimeout <= 0 {
		return
	}
	svc := r.Name
	switch {
	case localRedirect(r.Redirect):
		// compile.go getResolverNode: the start node is the redirect
		// target's resolver, with its request_timeout.
		t.note(api.ServiceResolver, svc, "request_timeout: the chain starts at the redirect's target, whose resolver's request_timeout applies instead, here as in Consul")
	case t.e.Routers[svc] != nil || t.e.Splitters[svc] != nil:
		t.note(api.ServiceResolver, svc, "request_timeout: Consul applies it only where the discovery chain starts at the resolver; %s has a service-router or service-splitter, so none of its routes gets it, here as in Consul", svc)
	case t.hasChain(svc):
		t.note(api.ServiceResolver, svc, "request_timeout is the timeout of %s's chain (no service-router or service-splitter, as Consul applies it): the routes made from entries and the routes in HCL that follow the chain and set no timeout", svc)
	default:
		// hasChain is false only for a service no entry makes HTTP.
		t.note(api.ServiceResolver, svc, "request_timeout: %s is not an HTTP service in the entries (service-defaults protocol), so no route of its chain carries it, here as in Consul; routes in HCL naming %s keep theirs", svc, svc)
	}
}

func (t *translator) loadBalancer(b *hclwrite.Body, name string, lb *api.LoadBalancer) {
	switch p := lb.Policy; p {
	case "", "round_robin", "least_request", "ring_hash", "random":
		if p != "" {
			b.SetAttributeValue("lb_policy", cty.StringVal(p))
		}
	case "maglev":
		b.SetAttributeValue("lb_policy", cty.StringVal("ring_hash"))
		t.note(api.ServiceResolver, name, "load_balancer maglev becomes ring_hash (the same consistent hashing, another table)")
	default:
		t.note(api.ServiceResolver, name, "load_balancer policy %q is not translated", p)
	}
	if lb.RingHashConfig != nil || lb.LeastRequestConfig != nil {
		t.note(api.ServiceResolver, name, "ring_hash_config and least_request_config keep Envoy's defaults")
	}
	for _, hp := range lb.HashPolicies {
		var attr string
		var val cty.Value
		switch {
		case hp.SourceIP:
			attr, val = "source_ip", cty.True
		case hp.Field == "header":
			attr, val = "header", cty.StringVal(hp.FieldValue)
		case hp.Field == "cookie":
			attr, val = "cookie", cty.StringVal(hp.FieldValue)
			if hp.CookieConfig != nil {
				t.note(api.ServiceResolver, name, "hash policy cookie %q: cookie_config (ttl, path, session) is not translated", hp.FieldValue)
			}
		default:
			t.note(api.ServiceResolver, name, "hash policy on %q is not translated", hp.Field)
			continue
		}
		hb := b.AppendNewBlock("hash_policy", nil).Body()
		hb.SetAttributeValue(attr, val)
		if hp.Terminal {
			hb.SetAttributeValue("terminal", cty.True)
		}
	}
}

func strList(ss []string) cty.Value {
	vs := make([]cty.Value, len(ss))
	for i, s := range ss {
		vs[i] = cty.StringVal(s)
	}
	return cty.ListVal(vs)
}

var (
	tagIn       = regexp.MustCompile(`^"?([^"\s]+)"?\s+in\s+Service\.Tags$`)
	tagContains = regexp.MustCompile(`^Service\.Tags\s+contains\s+"?([^"\s]+)"?$`)
	metaEq      = regexp.MustCompile(`^Service\.Meta\.([A-Za-z0-9_.-]+)\s*==\s*"?([^"\s]*)"?$`)
)

// parseFilter reads a subset filter that is tag membership and meta
// equality tests joined by "and": what the bridge's subsets (tags and meta
// an instance must all have) express. Anything else is not.
func parseFilter(filter string) (tags []string, meta map[string]string, ok bool) {
	f := strings.TrimSpace(filter)
	if f == "" {
		return nil, nil, true
	}
	for _, clause := range strings.Split(f, " and ") {
		c := strings.TrimSpace(strings.Trim(strings.TrimSpace(clause), "()"))
		switch {
		case tagIn.MatchString(c):
			tags = append(tags, tagIn.FindStringSubmatch(c)[1])
		case tagContains.MatchString(c):
			tags = append(tags, tagContains.FindStringSubmatch(c)[1])
		case metaEq.MatchString(c):
			m := metaEq.FindStringSubmatch(c)
			if meta == nil {
				meta = map[string]string{}
			}
			meta[m[1]] = m[2]
		default:
			return nil, nil, false
		}
	}
	return tags, meta, true
}

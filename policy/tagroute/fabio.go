package tagroute

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// fabioRoute gathers the services that share one urlprefix: Fabio splits
// their traffic by weight= (a fraction), the rest evenly.
type fabioRoute struct {
	host, path string
	strip      string
	redirect   *ir.Redirect
	services   []string
	weights    map[string]float64 // explicit weight= per service
	source     string
}

// fabioTag is one urlprefix tag of one service, parsed.
type fabioTag struct {
	claim
	strip    string
	redirect *ir.Redirect
	weight   float64 // 0: not set
	source   string
}

// fabio reads `urlprefix-HOST/PATH opt=value ...` tags with the options
// strip=, redirect=CODE,URL and weight=. Only the tags owners admits are
// combined, so a service's weight=, redirect= or strip= reaches a prefix
// only when the service may route its host.
func fabio(services []Service, owners Owners) ([]Route, []string) {
	tags, warnings := fabioTags(services)
	claims := make([]claim, len(tags))
	for i, t := range tags {
		claims[i] = t.claim
	}
	admitted, refused := owners.admit(claims)
	warnings = append(warnings, refused...)
	byPrefix := map[string]*fabioRoute{}
	var keys []string
	for _, t := range tags {
		if !admitted(t.claim) {
			continue
		}
		key := t.host + t.path
		r := byPrefix[key]
		if r == nil {
			r = &fabioRoute{host: t.host, path: t.path, weights: map[string]float64{}, source: t.source}
			byPrefix[key] = r
			keys = append(keys, key)
		}
		if t.strip != "" {
			r.strip = t.strip
		}
		if t.redirect != nil {
			r.redirect = t.redirect
		}
		if t.weight > 0 {
			r.weights[t.service] = t.weight
		}
		if !slices.Contains(r.services, t.service) {
			r.services = append(r.services, t.service)
		}
	}
	var out []Route
	for _, key := range keys {
		r := byPrefix[key]
		rt := ir.Route{Source: r.source, Match: ir.RouteMatch{PathPrefix: r.path}}
		switch {
		case r.redirect != nil:
			rt.Redirect = r.redirect
		default:
			rt.Clusters = fabioWeights(r)
			if r.strip != "" {
				// Fabio removes the prefix; Envoy's prefix rewrite would
				// leave "//x" for prefix "/api" on "/api/x".
				rt.Rewrite = &ir.Rewrite{Regex: "^" + regexp.QuoteMeta(strings.TrimSuffix(r.strip, "/")) + "/?", Substitution: "/"}
				// A long strip prefix makes a program Envoy refuses,
				// which would NACK the whole route configuration.
				if err := ir.CheckRegex(rt.Rewrite.Regex); err != nil {
					warnings = append(warnings, fmt.Sprintf("%s: strip: %v; route left out", r.source, err))
					continue
				}
			}
		}
		out = append(out, Route{Host: r.host, Route: rt, Services: r.services, priority: len(r.path), order: r.source})
	}
	return out, warnings
}

// fabioTags parses every service's urlprefix tags; a tag with a bad
// option is left out with a warning.
func fabioTags(services []Service) ([]fabioTag, []string) {
	var out []fabioTag
	var warnings []string
	for _, s := range services {
		for _, tag := range uniqueTags(s.Tags) {
			spec, ok := strings.CutPrefix(tag, "urlprefix-")
			if !ok {
				continue
			}
			fields := strings.Fields(spec)
			if len(fields) == 0 {
				warnings = append(warnings, fmt.Sprintf("service %q tag %q: no host or path after urlprefix-", s.Name, tag))
				continue
			}
			host, path, found := strings.Cut(fields[0], "/")
			if !found || strings.HasPrefix(host, ":") {
				warnings = append(warnings, fmt.Sprintf("service %q tag %q: want urlprefix-HOST/PATH (TCP routes, :PORT, are not read)", s.Name, tag))
				continue
			}
			t := fabioTag{claim: claim{service: s.Name, tag: tag, host: claimHost(host), path: "/" + path},
				source: fmt.Sprintf("tag %q of service %q", tag, s.Name)}
			bad := false
			for _, opt := range fields[1:] {
				k, v, _ := strings.Cut(opt, "=")
				switch k {
				case "strip":
					t.strip = v
				case "redirect":
					rd, err := fabioRedirect(v)
					if err != nil {
						warnings = append(warnings, fmt.Sprintf("service %q tag %q: %v", s.Name, tag, err))
						bad = true
						continue
					}
					t.redirect = rd
				case "weight":
					w, err := strconv.ParseFloat(v, 64)
					if err != nil || w <= 0 || w > 1 {
						warnings = append(warnings, fmt.Sprintf("service %q tag %q: weight %q is not a fraction in (0, 1]", s.Name, tag, v))
						bad = true
						continue
					}
					t.weight = w
				case "proto", "opts", "tlsskipverify", "host":
					warnings = append(warnings, fmt.Sprintf("service %q tag %q: option %s is not read (set it in the policy's service block)", s.Name, tag, k))
				default:
					warnings = append(warnings, fmt.Sprintf("service %q tag %q: unknown option %q", s.Name, tag, opt))
				}
			}
			if !bad {
				out = append(out, t)
			}
		}
	}
	return out, warnings
}

// fabioWeights turns fractions into integer weights: services with
// weight= get their share, the others split the rest evenly.
func fabioWeights(r *fabioRoute) []ir.WeightedCluster {
	slices.Sort(r.services)
	var set float64
	unset := 0
	for _, s := range r.services {
		if w, ok := r.weights[s]; ok {
			set += w
		} else {
			unset++
		}
	}
	rest := 0.0
	if unset > 0 && set < 1 {
		rest = (1 - set) / float64(unset)
	}
	var out []ir.WeightedCluster
	for _, s := range r.services {
		w, ok := r.weights[s]
		if !ok {
			w = rest
		}
		if n := uint32(w*1000 + 0.5); n > 0 {
			out = append(out, ir.WeightedCluster{Name: s, Weight: n})
		}
	}
	if len(out) == 1 {
		out[0].Weight = 1
	}
	return out
}

// fabioRedirect reads redirect=CODE,URL as Fabio does: a URL ending in
// $path keeps the request's path and query; any other is the Location
// exactly.
func fabioRedirect(v string) (*ir.Redirect, error) {
	code, target, ok := strings.Cut(v, ",")
	status, err := strconv.Atoi(code)
	if !ok || err != nil || !slices.Contains([]int{301, 302, 303, 307, 308}, status) {
		return nil, fmt.Errorf("redirect %q: want CODE,URL with CODE 301, 302, 303, 307 or 308", v)
	}
	keep := strings.HasSuffix(target, "$path")
	u, err := url.Parse(strings.TrimSuffix(target, "$path"))
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("redirect %q: %q is not an absolute URL", v, target)
	}
	rd := &ir.Redirect{Scheme: u.Scheme, Host: u.Hostname(), Status: status}
	if p := u.Port(); p != "" {
		port, _ := strconv.Atoi(p)
		rd.Port = uint32(port)
	}
	if !keep {
		// Fabio sends the target as it is: its own path ("/" if none) and
		// its own query. Envoy would keep the request's path without a
		// path_redirect and its query without strip_query (a query in
		// path_redirect replaces the request's and is never stripped).
		rd.Path, rd.StripQuery = u.EscapedPath(), true
		if rd.Path == "" {
			rd.Path = "/"
		}
		if u.RawQuery != "" {
			rd.Path += "?" + u.RawQuery
		}
	}
	return rd, nil
}

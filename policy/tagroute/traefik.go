package tagroute

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

type traefikRouter struct {
	service, name, rule string
	priority            int
	middlewares         []string
	tag                 string
}

type traefikMiddleware struct {
	stripPrefixes []string
	redirectTo    string // scheme
	permanent     bool
}

var (
	routerTag     = regexp.MustCompile(`^traefik\.http\.routers\.([^.=]+)\.(rule|priority|middlewares)=(.*)$`)
	middlewareTag = regexp.MustCompile(`^traefik\.http\.middlewares\.([^.=]+)\.([a-z]+)\.([a-z]+)=(.*)$`)
	ruleTerm      = regexp.MustCompile(`^(Host|PathPrefix|Path|Method|Headers)\((.*)\)$`)
	ruleArg       = regexp.MustCompile("^\\s*(?:`([^`]*)`|\"([^\"]*)\")\\s*(?:,|$)")
)

// traefik reads Traefik's Consul catalog tags: routers (rule with Host,
// PathPrefix, Path, Method and Headers joined by &&; priority;
// middlewares) and the stripprefix and redirectscheme middlewares.
// traefik.enable=false leaves a service out.
func traefik(services []Service) ([]Route, []string) {
	var warnings []string
	middlewares := map[string]*traefikMiddleware{}
	var routers []*traefikRouter
	for _, s := range services {
		tags := uniqueTags(s.Tags)
		enabled := true
		byName := map[string]*traefikRouter{}
		for _, tag := range tags {
			if tag == "traefik.enable=false" {
				enabled = false
			}
			if m := middlewareTag.FindStringSubmatch(tag); m != nil {
				mw := middlewares[m[1]]
				if mw == nil {
					mw = &traefikMiddleware{}
					middlewares[m[1]] = mw
				}
				switch m[2] + "." + m[3] {
				case "stripprefix.prefixes":
					mw.stripPrefixes = strings.Split(m[4], ",")
				case "redirectscheme.scheme":
					mw.redirectTo = m[4]
				case "redirectscheme.permanent":
					mw.permanent = m[4] == "true"
				default:
					warnings = append(warnings, fmt.Sprintf("service %q tag %q: middleware %s is not read (stripprefix and redirectscheme are)", s.Name, tag, m[2]))
				}
				continue
			}
			m := routerTag.FindStringSubmatch(tag)
			if m == nil {
				continue
			}
			r := byName[m[1]]
			if r == nil {
				r = &traefikRouter{service: s.Name, name: m[1], priority: -1}
				byName[m[1]] = r
			}
			switch m[2] {
			case "rule":
				r.rule, r.tag = m[3], tag
			case "priority":
				p, err := strconv.Atoi(m[3])
				if err != nil {
					warnings = append(warnings, fmt.Sprintf("service %q tag %q: priority is not a number", s.Name, tag))
					continue
				}
				r.priority = p
			case "middlewares":
				for _, name := range strings.Split(m[3], ",") {
					name, _, _ = strings.Cut(strings.TrimSpace(name), "@") // "strip@consulcatalog"
					r.middlewares = append(r.middlewares, name)
				}
			}
		}
		if !enabled {
			continue
		}
		for _, name := range sortedNames(byName) {
			if byName[name].rule != "" {
				routers = append(routers, byName[name])
			}
		}
	}
	var out []Route
	for _, r := range routers {
		routes, err := r.routes(middlewares)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("service %q tag %q: %v", r.service, r.tag, err))
			continue
		}
		out = append(out, routes...)
	}
	return out, warnings
}

func sortedNames[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// routes is a router as routes: one per Host argument.
func (r *traefikRouter) routes(middlewares map[string]*traefikMiddleware) ([]Route, error) {
	if strings.Contains(r.rule, "||") || strings.Contains(r.rule, "!") {
		return nil, fmt.Errorf("rule %q: only terms joined by && are read (no ||, no !)", r.rule)
	}
	var hosts []string
	var match ir.RouteMatch
	for _, term := range strings.Split(r.rule, "&&") {
		m := ruleTerm.FindStringSubmatch(strings.TrimSpace(term))
		if m == nil {
			return nil, fmt.Errorf("rule term %q: want Host, PathPrefix, Path, Method or Headers with quoted arguments", strings.TrimSpace(term))
		}
		args, err := ruleArgs(m[2])
		if err != nil {
			return nil, fmt.Errorf("rule term %q: %v", strings.TrimSpace(term), err)
		}
		switch {
		case m[1] == "Host":
			hosts = append(hosts, args...)
		case m[1] == "PathPrefix" && len(args) == 1:
			match.PathPrefix = args[0]
		case m[1] == "Path" && len(args) == 1:
			match.Path = args[0]
		case m[1] == "Method" && len(args) == 1:
			match.Method = strings.ToUpper(args[0])
		case m[1] == "Headers" && len(args) == 2:
			match.Headers = append(match.Headers, ir.ValueMatch{Name: args[0], Exact: args[1]})
		default:
			return nil, fmt.Errorf("rule term %q: wrong number of arguments", strings.TrimSpace(term))
		}
	}
	rt := ir.Route{Source: fmt.Sprintf("tag %q of service %q", r.tag, r.service), Match: match, Clusters: []ir.WeightedCluster{{Name: r.service, Weight: 1}}}
	for _, name := range r.middlewares {
		mw := middlewares[name]
		switch {
		case mw == nil:
			return nil, fmt.Errorf("middleware %q is not defined by any service's tags", name)
		case mw.redirectTo != "":
			status := 302
			if mw.permanent {
				status = 308
			}
			rt.Clusters, rt.Redirect = nil, &ir.Redirect{Scheme: mw.redirectTo, Status: status}
		case len(mw.stripPrefixes) > 0:
			var alts []string
			for _, p := range mw.stripPrefixes {
				alts = append(alts, regexp.QuoteMeta(strings.TrimSuffix(p, "/")))
			}
			rt.Rewrite = &ir.Rewrite{Regex: "^(" + strings.Join(alts, "|") + ")/?", Substitution: "/"}
			// Many or long prefixes make a program Envoy refuses, which
			// would NACK the whole route configuration.
			if err := ir.CheckRegex(rt.Rewrite.Regex); err != nil {
				return nil, fmt.Errorf("middleware %q: its stripPrefix prefixes make a rewrite pattern Envoy refuses: %w", name, err)
			}
		}
	}
	priority := r.priority
	if priority < 0 {
		priority = len(r.rule) // Traefik's default: longer rules first
	}
	if len(hosts) == 0 {
		hosts = []string{""}
	}
	var out []Route
	for _, h := range hosts {
		out = append(out, Route{Host: h, Route: rt, Services: []string{r.service}, priority: priority, order: r.service + "/" + r.name})
	}
	return out, nil
}

// ruleArgs reads `a`, "b" argument lists.
func ruleArgs(s string) ([]string, error) {
	var out []string
	for rest := strings.TrimSpace(s); rest != ""; {
		m := ruleArg.FindStringSubmatch(rest)
		if m == nil {
			return nil, fmt.Errorf("arguments %q are not quoted strings", s)
		}
		out = append(out, m[1]+m[2])
		rest = strings.TrimSpace(rest[len(m[0]):])
	}
	return out, nil
}

package tagroute

import (
	"fmt"
	"maps"
	"reflect"
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
// traefik.enable=false leaves a service out. A router's middleware is the
// one its own service declares, else the one other services declare if
// they all declare it alike: another service's tags cannot redefine a
// middleware a router already has.
func traefik(services []Service, owners Owners) ([]Route, []string) {
	var warnings []string
	middlewares := map[string]map[string]*traefikMiddleware{} // service -> name -> middleware
	var routers []*traefikRouter
	for _, s := range services {
		tags := uniqueTags(s.Tags)
		enabled := true
		byName := map[string]*traefikRouter{}
		own := map[string]*traefikMiddleware{}
		for _, tag := range tags {
			if tag == "traefik.enable=false" {
				enabled = false
			}
			if m := middlewareTag.FindStringSubmatch(tag); m != nil {
				mw := own[m[1]]
				if mw == nil {
					mw = &traefikMiddleware{}
					own[m[1]] = mw
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
		middlewares[s.Name] = own
		for _, name := range sortedNames(byName) {
			if byName[name].rule != "" {
				routers = append(routers, byName[name])
			}
		}
	}
	var routes []Route
	var claims []claim
	for _, r := range routers {
		rs, err := r.routes(middlewares)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("service %q tag %q: %v", r.service, r.tag, err))
			continue
		}
		for _, rt := range rs {
			claims = append(claims, rt.claim)
		}
		routes = append(routes, rs...)
	}
	admitted, refused := owners.admit(claims)
	warnings = append(warnings, refused...)
	return slices.DeleteFunc(routes, func(r Route) bool { return !admitted(r.claim) }), warnings
}

// middleware finds the middleware a router of service names: its own
// service's, else the one every other service that declares it declares
// alike.
func middleware(all map[string]map[string]*traefikMiddleware, service, name string) (*traefikMiddleware, error) {
	if mw := all[service][name]; mw != nil {
		return mw, nil
	}
	var found *traefikMiddleware
	var from []string
	for _, s := range sortedNames(all) {
		mw := all[s][name]
		if mw == nil {
			continue
		}
		from = append(from, s)
		if found != nil && !reflect.DeepEqual(found, mw) {
			return nil, fmt.Errorf("middleware %q is declared differently by services %s; declare it in this service's own tags", name, quoted(from))
		}
		found = mw
	}
	if found == nil {
		return nil, fmt.Errorf("middleware %q is not defined by any service's tags", name)
	}
	return found, nil
}

func sortedNames[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// routes is a router as routes: one per Host argument.
func (r *traefikRouter) routes(middlewares map[string]map[string]*traefikMiddleware) ([]Route, error) {
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
			for _, h := range args {
				// Envoy matches hosts case-insensitively: one host once.
				if h = claimHost(h); !slices.Contains(hosts, h) {
					hosts = append(hosts, h)
				}
			}
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
		mw, err := middleware(middlewares, r.service, name)
		switch {
		case err != nil:
			return nil, err
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
		out = append(out, Route{Host: h, Route: rt, Services: []string{r.service}, priority: priority, order: r.service + "/" + r.name,
			claim: claim{service: r.service, tag: r.tag, host: h, path: match.PathPrefix + match.Path}})
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

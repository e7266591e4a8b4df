package tagroute

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

func TestFabio(t *testing.T) {
	routes, warnings := Routes("fabio", []Service{
		{Name: "shop", Tags: []string{"urlprefix-shop.example.com/", "v1", "urlprefix-shop.example.com/"}},
		{Name: "api", Tags: []string{"urlprefix-/api strip=/api", "urlprefix-/legacy redirect=301,https://new.example.com$path"}},
		{Name: "api-v2", Tags: []string{"urlprefix-/api weight=0.2 strip=/api"}},
		{Name: "odd", Tags: []string{"urlprefix-", "urlprefix-:5432", "urlprefix-/x weight=2", "urlprefix-/y proto=https"}},
	}, Owners{Allowed: map[string][]string{"/api": {"api", "api-v2"}}})
	type got struct {
		Host string
		Rt   ir.Route
	}
	var gs []got
	for _, r := range routes {
		r.Route.Source = ""
		gs = append(gs, got{r.Host, r.Route})
	}
	want := []got{
		{"", ir.Route{Match: ir.RouteMatch{PathPrefix: "/legacy"}, Redirect: &ir.Redirect{Scheme: "https", Host: "new.example.com", Status: 301}}},
		{"", ir.Route{Match: ir.RouteMatch{PathPrefix: "/api"}, Clusters: []ir.WeightedCluster{{Name: "api", Weight: 800}, {Name: "api-v2", Weight: 200}},
			Rewrite: &ir.Rewrite{Regex: "^/api/?", Substitution: "/"}}},
		{"", ir.Route{Match: ir.RouteMatch{PathPrefix: "/y"}, Clusters: []ir.WeightedCluster{{Name: "odd", Weight: 1}}}},
		{"shop.example.com", ir.Route{Match: ir.RouteMatch{PathPrefix: "/"}, Clusters: []ir.WeightedCluster{{Name: "shop", Weight: 1}}}},
	}
	if diff := cmp.Diff(want, gs); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
	joined := strings.Join(warnings, "\n")
	for _, w := range []string{`service "odd" tag "urlprefix-": no host or path`, `"urlprefix-:5432": want urlprefix-HOST/PATH`, `weight "2" is not a fraction`, `option proto is not read`} {
		if !strings.Contains(joined, w) {
			t.Errorf("warnings lack %q:\n%s", w, joined)
		}
	}
}

// TestFabioRedirect: a redirect= target is sent as Fabio sends it. Without
// $path the Location is the target URL itself (its path, "/" when it has
// none, and its own query, never the request's); with $path the request's
// path and query follow the target's host.
func TestFabioRedirect(t *testing.T) {
	tests := map[string]*ir.Redirect{
		"https://new.example.com":                  {Scheme: "https", Host: "new.example.com", Path: "/", StripQuery: true, Status: 301},
		"https://new.example.com/":                 {Scheme: "https", Host: "new.example.com", Path: "/", StripQuery: true, Status: 301},
		"http://new.example.com:8080/landing":      {Scheme: "http", Host: "new.example.com", Port: 8080, Path: "/landing", StripQuery: true, Status: 301},
		"https://new.example.com/landing?from=old": {Scheme: "https", Host: "new.example.com", Path: "/landing?from=old", StripQuery: true, Status: 301},
		"https://new.example.com$path":             {Scheme: "https", Host: "new.example.com", Status: 301},
		"https://new.example.com/$path":            {Scheme: "https", Host: "new.example.com", Status: 301},
	}
	for target, want := range tests {
		t.Run(target, func(t *testing.T) {
			tag := "urlprefix-old.example.com/ redirect=301," + target
			routes, warnings := Routes("fabio", []Service{{Name: "old", Tags: []string{tag}}}, Owners{})
			if len(routes) != 1 || len(warnings) > 0 {
				t.Fatalf("routes %+v, warnings %q: want one route", routes, warnings)
			}
			if diff := cmp.Diff(want, routes[0].Route.Redirect); diff != "" {
				t.Errorf("redirect (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTraefik(t *testing.T) {
	routes, warnings := Routes("traefik", []Service{
		{Name: "api", Tags: []string{
			"traefik.http.routers.api.rule=Host(`shop.example.com`, `www.shop.example.com`) && PathPrefix(`/api`) && Headers(`x-env`, `prod`)",
			"traefik.http.routers.api.middlewares=strip@consulcatalog",
			"traefik.http.middlewares.strip.stripprefix.prefixes=/api",
			"traefik.http.routers.admin.rule=PathPrefix(`/admin`) && Method(`get`)",
			"traefik.http.routers.admin.priority=100",
		}},
		{Name: "web", Tags: []string{"traefik.http.routers.web.rule=Host(`shop.example.com`)",
			"traefik.http.routers.insecure.rule=Host(`old.example.com`)", "traefik.http.routers.insecure.middlewares=tls",
			"traefik.http.middlewares.tls.redirectscheme.scheme=https", "traefik.http.middlewares.tls.redirectscheme.permanent=true"}},
		{Name: "hidden", Tags: []string{"traefik.enable=false", "traefik.http.routers.h.rule=Host(`h.example.com`)"}},
		{Name: "bad", Tags: []string{"traefik.http.routers.b.rule=Host(`a`) || Host(`b`)", "traefik.http.routers.c.rule=Query(`x`)", "traefik.http.routers.d.rule=PathPrefix(`/d`)", "traefik.http.routers.d.middlewares=nope"}},
	}, Owners{Allowed: map[string][]string{"Shop.example.com": {"api", "web"}}})
	var got []string
	for _, r := range routes {
		s := r.Host + " " + r.Route.Match.PathPrefix + r.Route.Match.Path + " " + r.Route.Match.Method
		if len(r.Route.Clusters) > 0 {
			s += " -> " + r.Route.Clusters[0].Name
		}
		if r.Route.Redirect != nil {
			s += " -> redirect " + r.Route.Redirect.Scheme
		}
		if r.Route.Rewrite != nil {
			s += " rewrite " + r.Route.Rewrite.Regex
		}
		got = append(got, s)
	}
	want := []string{
		" /admin GET -> api",
		"shop.example.com /api  -> api rewrite ^(/api)/?",
		"www.shop.example.com /api  -> api rewrite ^(/api)/?",
		"shop.example.com   -> web", // a longer rule: Traefik's default priority
		"old.example.com   -> redirect https",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
	joined := strings.Join(warnings, "\n")
	for _, w := range []string{"only terms joined by &&", `rule term "Query(`, `middleware "nope" is not defined`} {
		if !strings.Contains(joined, w) {
			t.Errorf("warnings lack %q:\n%s", w, joined)
		}
	}
	if strings.Contains(strings.Join(got, "\n"), "h.example.com") {
		t.Error("a service with traefik.enable=false was routed")
	}
}

func FuzzRoutes(f *testing.F) {
	f.Add("urlprefix-a.com/x strip=/x weight=0.5")
	f.Add("traefik.http.routers.a.rule=Host(`a`) && PathPrefix(`/p`)")
	f.Fuzz(func(t *testing.T, tag string) {
		for _, format := range Formats {
			Routes(format, []Service{{Name: "s", Tags: []string{tag}}, {Name: "t", Tags: []string{tag}}}, Owners{Domains: []string{"*.a", "b*"}}) // must not panic
		}
	})
}

// TestTagRouteRegexLimit: strip prefixes long enough to make a rewrite
// pattern over Envoy's RE2 program size limit leave their route out with
// a warning, instead of a route configuration every Envoy would refuse.
func TestTagRouteRegexLimit(t *testing.T) {
	long := "/" + strings.Repeat("p", 200)
	routes, warnings := Routes("fabio", []Service{{Name: "api", Tags: []string{"urlprefix-" + long + " strip=" + long, "urlprefix-/ok strip=/ok"}}}, Owners{})
	if len(routes) != 1 || routes[0].Route.Match.PathPrefix != "/ok" {
		t.Errorf("fabio routes = %+v, want only /ok", routes)
	}
	if w := strings.Join(warnings, "\n"); !strings.Contains(w, "over Envoy's limit") && !strings.Contains(w, "longer than any pattern") {
		t.Errorf("fabio warnings lack the regex limit:\n%s", w)
	}
	var prefixes []string
	for i := range 30 {
		prefixes = append(prefixes, fmt.Sprintf("/%c%d-service", 'a'+i%26, i*7919))
	}
	routes, warnings = Routes("traefik", []Service{{Name: "api", Tags: []string{
		"traefik.http.routers.api.rule=PathPrefix(`/api`)",
		"traefik.http.routers.api.middlewares=strip",
		"traefik.http.middlewares.strip.stripprefix.prefixes=" + strings.Join(prefixes, ","),
	}}}, Owners{})
	if len(routes) != 0 {
		t.Errorf("traefik routes = %+v, want none", routes)
	}
	if w := strings.Join(warnings, "\n"); !strings.Contains(w, "make a rewrite pattern Envoy refuses") {
		t.Errorf("traefik warnings lack the regex limit:\n%s", w)
	}
}

// FuzzTraefikRouters: a Traefik router is several tags (its rule, its
// middlewares, their settings) that only together reach the middleware
// and redirect parsers; three arbitrary tags under one router name, with
// owners that grant some hosts, never panic and never yield a route
// without a target.
func FuzzTraefikRouters(f *testing.F) {
	f.Add("Host(`a.example.com`) && PathPrefix(`/p`)", "strip,redir", "stripprefix.prefixes=/p,/q")
	f.Add("PathPrefix(`/x`) || Path(`/y`)", "redir", "redirectscheme.scheme=https")
	f.Add("Host(`*`)", "m", "redirectscheme.permanent=true")
	f.Fuzz(func(t *testing.T, rule, middlewares, setting string) {
		tags := []string{
			"traefik.http.routers.r.rule=" + rule,
			"traefik.http.routers.r.middlewares=" + middlewares,
			"traefik.http.middlewares.strip." + setting,
			"traefik.http.middlewares.redir." + setting,
			"traefik.http.routers.r.priority=" + setting,
		}
		routes, _ := Routes("traefik", []Service{{Name: "s", Tags: tags}}, Owners{Domains: []string{"*.example.com", "b*"}, Allowed: map[string][]string{"a.example.com": {"s"}, "/PATH": {"s"}}})
		for _, r := range routes {
			if r.Route.Redirect == nil && len(r.Route.Clusters) == 0 && r.Route.DirectResponse == nil {
				t.Fatalf("a route without a target from %q: %+v", tags, r.Route)
			}
		}
	})
}

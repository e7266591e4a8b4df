package tagroute

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// describe is a route as "host path -> target", "" host written "*".
func describe(routes []Route) []string {
	var out []string
	for _, r := range routes {
		h := r.Host
		if h == "" {
			h = "*"
		}
		s := h + " " + r.Route.Match.PathPrefix + r.Route.Match.Path + " ->"
		for _, c := range r.Route.Clusters {
			s += " " + c.Name
		}
		if r.Route.Redirect != nil {
			s += " redirect " + r.Route.Redirect.Host + r.Route.Redirect.Scheme
		}
		if r.Route.Rewrite != nil {
			s += " rewrite"
		}
		out = append(out, s)
	}
	return out
}

// TestOwnersHostile: one service's tags cannot take, join, redirect,
// out-rank or break another's host; the policy's hosts and owners decide.
func TestOwnersHostile(t *testing.T) {
	tests := map[string]struct {
		format   string
		services []Service
		owners   Owners
		want     []string
		warn     []string // substrings of the warnings, each required
	}{
		"hosts differing in case: one host, first service name routes it": {
			format: "traefik",
			services: []Service{
				{Name: "shop", Tags: []string{"traefik.http.routers.s.rule=Host(`Shop.example.com`)"}},
				{Name: "cart", Tags: []string{"traefik.http.routers.c.rule=Host(`shop.example.com`)"}},
			},
			want: []string{"shop.example.com  -> cart"},
			warn: []string{`service "shop" tag "traefik.http.routers.s.rule=Host(` + "`Shop.example.com`" + `)": host "shop.example.com" is already routed by service "cart"`},
		},
		"fabio hosts differing in case": {
			format: "fabio",
			services: []Service{
				{Name: "b", Tags: []string{"urlprefix-SHOP.example.com/"}},
				{Name: "a", Tags: []string{"urlprefix-shop.example.com/"}},
			},
			want: []string{"shop.example.com / -> a"},
			warn: []string{`service "b" tag "urlprefix-SHOP.example.com/": host "shop.example.com" is already routed by service "a"`},
		},
		"fabio weight= cannot join another service's prefix": {
			format: "fabio",
			services: []Service{
				{Name: "api", Tags: []string{"urlprefix-shop.example.com/api"}},
				{Name: "thief", Tags: []string{"urlprefix-shop.example.com/api weight=1"}},
			},
			want: []string{"shop.example.com /api -> api"},
			warn: []string{`service "thief" tag "urlprefix-shop.example.com/api weight=1": host "shop.example.com" is already routed by service "api"`},
		},
		"fabio redirect= cannot redirect another service's host": {
			format: "fabio",
			services: []Service{
				{Name: "web", Tags: []string{"urlprefix-shop.example.com/"}},
				{Name: "xx", Tags: []string{"urlprefix-shop.example.com/ redirect=301,https://evil.example.net$path"}},
			},
			want: []string{"shop.example.com / -> web"},
			warn: []string{`service "xx" tag`},
		},
		"fabio host-less: a path is owned, other paths are shared": {
			format: "fabio",
			services: []Service{
				{Name: "api", Tags: []string{"urlprefix-/api"}},
				{Name: "web", Tags: []string{"urlprefix-/", "urlprefix-/api redirect=302,https://evil.example.net"}},
			},
			want: []string{"* /api -> api", "* / -> web"},
			warn: []string{`service "web" tag "urlprefix-/api redirect=302,https://evil.example.net": path "/api" on any host is already routed by service "api"`},
		},
		"traefik priority cannot out-rank another service on its host": {
			format: "traefik",
			services: []Service{
				{Name: "web", Tags: []string{"traefik.http.routers.web.rule=Host(`shop.example.com`)"}},
				{Name: "zz", Tags: []string{"traefik.http.routers.z.rule=Host(`shop.example.com`) && PathPrefix(`/`)", "traefik.http.routers.z.priority=1000"}},
			},
			want: []string{"shop.example.com  -> web"},
			warn: []string{`service "zz" tag "traefik.http.routers.z.rule=Host(` + "`shop.example.com`" + `) && PathPrefix(` + "`/`" + `)": host "shop.example.com" is already routed by service "web"`},
		},
		"traefik middleware redefined by another service does not change a router": {
			format: "traefik",
			services: []Service{
				{Name: "api", Tags: []string{"traefik.http.routers.api.rule=Host(`api.example.com`)", "traefik.http.routers.api.middlewares=strip",
					"traefik.http.middlewares.strip.stripprefix.prefixes=/api"}},
				{Name: "zz", Tags: []string{"traefik.http.middlewares.strip.redirectscheme.scheme=http"}},
			},
			want: []string{"api.example.com  -> api rewrite"},
		},
		"traefik middleware declared differently by two others is refused": {
			format: "traefik",
			services: []Service{
				{Name: "api", Tags: []string{"traefik.http.routers.api.rule=Host(`api.example.com`)", "traefik.http.routers.api.middlewares=m"}},
				{Name: "x", Tags: []string{"traefik.http.middlewares.m.stripprefix.prefixes=/api"}},
				{Name: "y", Tags: []string{"traefik.http.middlewares.m.redirectscheme.scheme=http"}},
			},
			warn: []string{`middleware "m" is declared differently by services "x", "y"`},
		},
		"a host the policy serves is closed to tags": {
			format: "fabio",
			owners: Owners{Domains: []string{"Shop.example.com", "*.internal.example.com", "*"}},
			services: []Service{
				{Name: "api", Tags: []string{"urlprefix-shop.example.com/api", "urlprefix-db.internal.example.com/", "urlprefix-/x", "urlprefix-other.example.com/"}},
			},
			want: []string{"other.example.com / -> api"},
			warn: []string{
				`host "shop.example.com" is served by the policy's own virtual host (domain "Shop.example.com")`,
				`host "db.internal.example.com" is served by the policy's own virtual host (domain "*.internal.example.com")`,
				`path "/x" on any host is served by the policy's own virtual host (domain "*")`,
			},
		},
		"a tag host of * is any host: the policy's catch-all stays closed to it": {
			format: "fabio",
			owners: Owners{Domains: []string{"*"}},
			services: []Service{
				{Name: "rogue", Tags: []string{"urlprefix-*/", "urlprefix-*/admin"}},
			},
			warn: []string{
				`service "rogue" tag "urlprefix-*/": path "/" on any host is served by the policy's own virtual host (domain "*")`,
				`service "rogue" tag "urlprefix-*/admin": path "/admin" on any host is served by the policy's own virtual host (domain "*")`,
			},
		},
		"traefik Host(*) is any host: the policy's catch-all stays closed to it": {
			format:   "traefik",
			owners:   Owners{Domains: []string{"*"}},
			services: []Service{{Name: "rogue", Tags: []string{"traefik.http.routers.r.rule=Host(`*`) && PathPrefix(`/x`)"}}},
			warn:     []string{`path "/x" on any host is served by the policy's own virtual host (domain "*")`},
		},
		"a tag host of * cannot take a host-less path owners gives another": {
			format: "fabio",
			owners: Owners{Allowed: map[string][]string{"/admin": {"admin"}}},
			services: []Service{
				{Name: "admin", Tags: []string{"urlprefix-/admin"}},
				{Name: "rogue", Tags: []string{"urlprefix-*/admin"}},
			},
			want: []string{"* /admin -> admin"},
			warn: []string{`service "rogue" tag "urlprefix-*/admin": path "/admin" on any host is reserved by tag_routes owners for "admin"`},
		},
		"owners open a policy host and share a host": {
			format: "fabio",
			owners: Owners{Domains: []string{"shop.example.com"}, Allowed: map[string][]string{"SHOP.example.com": {"api", "web"}, "/api": {"api", "api-v2"}}},
			services: []Service{
				{Name: "web", Tags: []string{"urlprefix-shop.example.com/"}},
				{Name: "api", Tags: []string{"urlprefix-shop.example.com/api", "urlprefix-/api"}},
				{Name: "api-v2", Tags: []string{"urlprefix-/api weight=0.1"}},
				{Name: "zz", Tags: []string{"urlprefix-shop.example.com/zz", "urlprefix-/api weight=1"}},
			},
			want: []string{"* /api -> api api-v2", "shop.example.com /api -> api", "shop.example.com / -> web"},
			warn: []string{
				`service "zz" tag "urlprefix-shop.example.com/zz": host "shop.example.com" is reserved by tag_routes owners for "api", "web"`,
				`service "zz" tag "urlprefix-/api weight=1": path "/api" on any host is reserved by tag_routes owners for "api", "api-v2"`,
			},
		},
		"owners with an empty list lock a host": {
			format:   "traefik",
			owners:   Owners{Allowed: map[string][]string{"admin.example.com": {}}},
			services: []Service{{Name: "a", Tags: []string{"traefik.http.routers.a.rule=Host(`Admin.example.com`)"}}},
			warn:     []string{`host "admin.example.com" is reserved by tag_routes owners for no service;`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			routes, warnings := Routes(tc.format, tc.services, tc.owners)
			if diff := cmp.Diff(tc.want, describe(routes)); diff != "" {
				t.Errorf("routes (-want +got):\n%s", diff)
			}
			joined := strings.Join(warnings, "\n")
			for _, w := range tc.warn {
				if !strings.Contains(joined, w) {
					t.Errorf("warnings lack %q:\n%s", w, joined)
				}
			}
			// The same input in another order (another replica's catalog
			// read) gives the same routes.
			rev := make([]Service, len(tc.services))
			for i, s := range tc.services {
				rev[len(rev)-1-i] = s
			}
			again, _ := Routes(tc.format, rev, tc.owners)
			if diff := cmp.Diff(describe(routes), describe(again)); diff != "" {
				t.Errorf("routes depend on the catalog's order (-first +reversed):\n%s", diff)
			}
		})
	}
}

// TestPolicyDomain: the policy's domain for a host is the one Envoy picks
// for it: exact, then the longest suffix wildcard, then the longest
// prefix wildcard; "*" for host-less routes only.
func TestPolicyDomain(t *testing.T) {
	domains := []string{"shop.*", "*.com", "*", "*.Example.com", "shop.example.*", "API.example.com"}
	for host, want := range map[string]string{
		"api.example.com":  "API.example.com",
		"shop.example.com": "*.Example.com",
		"shop.example.org": "shop.example.*",
		"shop.net":         "shop.*",
		"other.net":        "",
		"":                 "*",
	} {
		if got := PolicyDomain(domains, host); got != want {
			t.Errorf("PolicyDomain(%q) = %q, want %q", host, got, want)
		}
	}
}

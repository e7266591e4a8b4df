package model

import (
	"slices"
	"strings"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

func TestBuildProxyless(t *testing.T) {
	inst := func(id, addr string, tags ...string) consul.Instance {
		return consul.Instance{ID: id, Address: addr, Port: 50051, Tags: tags, Status: consul.StatusPassing, Datacenter: "dc1"}
	}
	cat := consul.NewCatalog([]*consul.Service{
		{Name: "echo", Instances: []consul.Instance{inst("e1", "10.0.0.1", "v1"), inst("e2", "10.0.0.2", "v2")}},
		{Name: "web", Instances: []consul.Instance{inst("w1", "10.0.0.3")}},
		{Name: "unrouted", Instances: []consul.Instance{inst("u1", "10.0.0.4")}},
	})
	docs := []string{`
service "echo" {
  subset "v2" {
    tags = ["v2"]
  }
}
service "web" {
  lb_policy = "ring_hash"
  hash_policy {
    header = "x-user"
  }
}
proxy "grpc-*" {
  proxyless = true
}
grpc_service "echo-canary" {
  route {
    match {
      header "x-canary" {
        exact = "1"
      }
    }
    service = "echo"
    subset  = "v2"
  }
  route {
    service = "echo"
  }
}
grpc_service "search" {
  route {
    service = "search"
  }
}
`}
	var parsed []*policy.Document
	for _, src := range docs {
		d, diags := policy.Parse("p.hcl", []byte(src))
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		parsed = append(parsed, d)
	}
	cfg, diags := policy.Merge(parsed...)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	m, warnings := Build(cat, cfg.Policy)
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	// search is only named by a grpc_service: it becomes a (watched,
	// warned-about) cluster like any routed-to service; unrouted does not.
	if got := clusterNames(m); got != "echo,echo.v2,search,web" {
		t.Fatalf("clusters = %s", got)
	}
	if !slices.ContainsFunc(warnings, func(w string) bool {
		return w == `service "search" has no instances in the local datacenter (yet): cluster "search" has no local endpoints`
	}) {
		t.Errorf("no warning for the grpc_service target without instances: %v", warnings)
	}
	if tg := WatchTargets(cfg.Policy); !slices.Contains(tg.Services, consul.ServiceKey{Name: "search"}) {
		t.Errorf("grpc_service target not watched: %v", tg.Services)
	}

	var names []string
	byName := map[string]ir.Listener{}
	for _, l := range m.Proxyless {
		names = append(names, l.Name)
		byName[l.Name] = l
	}
	// One per grpc_service, and a default per service cluster (not the
	// echo.v2 subset); search has its own block, so no second default.
	if !slices.Equal(names, []string{"echo", "echo-canary", "search", "web"}) {
		t.Fatalf("API listeners = %v", names)
	}
	canary := byName["echo-canary"].VirtualHosts[0]
	if len(canary.Routes) != 2 || canary.Routes[0].Clusters[0].Name != "echo.v2" || canary.Routes[1].Clusters[0].Name != "echo" ||
		!slices.Equal(canary.Domains, []string{"*"}) {
		t.Errorf("echo-canary = %+v", canary)
	}
	def := byName["web"].VirtualHosts[0].Routes
	if len(def) != 1 || def[0].Clusters[0] != (ir.WeightedCluster{Name: "web", Weight: 1}) || def[0].Match.PathPrefix != "/" ||
		len(def[0].HashPolicies) != 1 || def[0].HashPolicies[0].Header != "x-user" {
		t.Errorf("default web route = %+v; want every call to web, hashing on x-user", def)
	}
	var grpcGroup *ir.Group
	for i := range m.Groups {
		if m.Groups[i].Name == "grpc-*" {
			grpcGroup = &m.Groups[i]
		}
	}
	if grpcGroup == nil || !grpcGroup.Proxyless || len(grpcGroup.Listeners) != 0 {
		t.Errorf("proxyless group = %+v", grpcGroup)
	}

	// Without policy every service still gets its default API listener.
	m, _ = Build(cat, nil)
	names = nil
	for _, l := range m.Proxyless {
		names = append(names, l.Name)
	}
	if !slices.Equal(names, []string{"echo", "unrouted", "web"}) {
		t.Errorf("API listeners without policy = %v", names)
	}
}

// TestProxylessChainNotFollowable: a chain with a route gRPC clients
// cannot be served (a rewrite) is not followed by xds:///echo's default
// API listener, which keeps sending every call to echo, and a warning
// says so and names the route; a chain they can follow is.
func TestProxylessChainNotFollowable(t *testing.T) {
	cat := consul.NewCatalog([]*consul.Service{{Name: "echo", Instances: []consul.Instance{
		{ID: "e1", Address: "10.0.0.1", Port: 50051, Tags: []string{"v1"}, Status: consul.StatusPassing, Datacenter: "dc1"}}}})
	chain := func(extra string) *policy.Policy {
		return meshPolicy(t, `proxy "grpc-*" {
  proxyless = true
}
service "echo" {
  subset "v1" {
    tags = ["v1"]
  }
}
chain "echo" {
  route {
    match {
      path_prefix = "/admin"
    }
    service = "echo"
    subset  = "v1"
`+extra+`
  }
  route {
    service = "echo"
    subset  = "v1"
  }
}
`)
	}
	routes := func(m *ir.Model) []string {
		var out []string
		for _, l := range m.Proxyless {
			if l.Name == "echo" {
				for _, r := range l.VirtualHosts[0].Routes {
					out = append(out, r.Clusters[0].Name)
				}
			}
		}
		return out
	}
	m, warnings := Build(cat, chain("    rewrite {\n      prefix = \"/\"\n    }\n"))
	if got := routes(m); !slices.Equal(got, []string{ir.ProxylessClusterPrefix + "echo"}) && !slices.Equal(got, []string{"echo"}) {
		t.Errorf("xds:///echo routes to %v, want every instance of echo", got)
	}
	if !slices.ContainsFunc(warnings, func(w string) bool {
		return strings.Contains(w, "xds:///echo do not follow its chain") && strings.Contains(w, "a rewrite")
	}) {
		t.Errorf("no warning that gRPC clients do not follow echo's chain: %q", warnings)
	}
	m, warnings = Build(cat, chain(""))
	if got := routes(m); len(got) != 2 || !strings.HasSuffix(got[0], "echo.v1") {
		t.Errorf("xds:///echo routes to %v, want the chain's two routes to echo.v1 (warnings %q)", got, warnings)
	}
}

package policy

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
)

const meshRoutesSrc = `mesh {}
mesh_routes "api" {
  route {
    match {
      path_prefix = "/v2"
    }
    split {
      service = "api"
      weight  = 90
    }
    split {
      service = "api-canary"
      weight  = 10
    }
    timeout = "2s"
    retry {
      attempts = 3
    }
  }
  route {
    service = "api"
  }
}
`

// TestMeshRoutes: a mesh_routes block resolves to service targets with
// the route details of a listener route, and lists its targets.
func TestMeshRoutes(t *testing.T) {
	cfg, diags := loadDocs(false, meshRoutesSrc)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	p := cfg.Policy
	mr := p.MeshRoutesFor("api")
	if mr == nil || len(mr.Routes) != 2 || mr.Source != "a.hcl:2:1" {
		t.Fatalf("mesh routes = %+v", mr)
	}
	r0 := mr.Routes[0]
	if want := []Target{{Service: "api", Weight: 90}, {Service: "api-canary", Weight: 10}}; !slices.Equal(r0.Targets, want) {
		t.Errorf("targets = %+v, want %+v", r0.Targets, want)
	}
	if r0.Timeout != 2*time.Second || r0.Retry == nil || r0.Retry.Attempts != 3 || r0.Match.PathPrefix != "/v2" {
		t.Errorf("route = %+v", r0)
	}
	if got := p.MeshRouteTargets(); !slices.Equal(got, []string{"api", "api-canary"}) {
		t.Errorf("targets = %v", got)
	}
	if p.MeshRoutesFor("web") != nil {
		t.Error("mesh routes for a service without a block")
	}
	// mesh routes are no service clusters: nothing is exported for them.
	if len(p.Services) != 0 {
		t.Errorf("services = %v", p.Services)
	}
}

// TestMeshRoutesDiagnostics: what mesh_routes cannot serve is an error at
// its position. A subset is served (a mesh cluster of its own, as Consul's
// resolver subsets are), so it must be declared.
func TestMeshRoutesDiagnostics(t *testing.T) {
	for name, tc := range map[string]struct{ src, diag string }{
		"subset":       {"mesh {}\nmesh_routes \"api\" {\n  route {\n    service = \"api\"\n    subset  = \"v2\"\n  }\n}\n", "a.hcl:5:15: Unknown subset"},
		"split subset": {"mesh {}\nmesh_routes \"api\" {\n  route {\n    split {\n      service = \"api\"\n      subset = \"v2\"\n      weight = 1\n    }\n  }\n}\n", "a.hcl:6:16: Unknown subset"},
		"mirror":       {"mesh {}\nmesh_routes \"api\" {\n  route {\n    service = \"api\"\n    mirror {\n      service = \"shadow\"\n    }\n  }\n}\n", "a.hcl:5:5: Unsupported in mesh_routes"},
		"cors":         {"mesh {}\nmesh_routes \"api\" {\n  route {\n    service = \"api\"\n    cors {\n      allow_origins = [\"*\"]\n    }\n  }\n}\n", "a.hcl:5:5: Unsupported in mesh_routes"},
		"ext_authz":    {"mesh {}\nmesh_routes \"api\" {\n  route {\n    service = \"api\"\n    ext_authz = false\n  }\n}\n", "a.hcl:5:17: Unsupported in mesh_routes"},
		"no routes":    {"mesh {}\n\nmesh_routes \"api\" {\n}\n", "a.hcl:3:1: mesh_routes without routes"},
		"bad name":     {"mesh {}\nmesh_routes \"a b\" {\n  route {\n    service = \"api\"\n  }\n}\n", "a.hcl:2:1: Invalid service name"},
		"two actions":  {"mesh {}\nmesh_routes \"api\" {\n  route {\n    service = \"api\"\n    split {\n      service = \"b\"\n      weight = 1\n    }\n  }\n}\n", "a.hcl:3:3: Route needs exactly one action"},
		"duplicate":    {"mesh {}\nmesh_routes \"api\" {\n  route {\n    service = \"api\"\n  }\n}\n\nmesh_routes \"api\" {\n  route {\n    service = \"api\"\n  }\n}\n", "a.hcl:8:1: Duplicate mesh_routes block"},
	} {
		t.Run(name, func(t *testing.T) {
			_, diags := loadDocs(false, tc.src)
			if !diags.HasErrors() {
				t.Fatalf("no error, want %s", tc.diag)
			}
			got := FormatDiagnostics(diags)
			if !strings.HasPrefix(got[0], tc.diag) {
				t.Fatalf("got %q, want %s", got, tc.diag)
			}
			if strings.Contains(tc.diag, "Unsupported") && len(got) != 1 {
				// Refused once.
				t.Errorf("diagnostics = %q, want one", got)
			}
		})
	}
}

// TestMeshRoutesWithoutMesh: mesh_routes without a mesh warn (nothing
// would take them).
func TestMeshRoutesWithoutMesh(t *testing.T) {
	_, diags := loadDocs(false, strings.TrimPrefix(meshRoutesSrc, "mesh {}\n"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	i := slices.IndexFunc(diags, func(d *hcl.Diagnostic) bool { return d.Summary == "mesh_routes without a mesh" })
	if i < 0 || diags[i].Severity != hcl.DiagWarning || diags[i].Subject.Start.Line != 1 {
		t.Fatalf("diags = %v", diags)
	}
}

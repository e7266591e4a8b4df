package policy

import (
	"strings"
	"testing"
)

// TestAmbiguousServiceNames: cluster S.X is subset X of service S, so a
// route to a Consul service named S.X would share that cluster (and put
// the other service's instances behind the subset): an error at the route.
// (A service block may not have a dotted name at all.)
func TestAmbiguousServiceNames(t *testing.T) {
	src := `service "api" {
  subset "v2" {
    tags = ["v2"]
  }
}
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      route {
        service = "api.v2"
      }
    }
  }
}
`
	doc, diags := Parse("p.hcl", []byte(src))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	_, diags = Merge(doc)
	lines := strings.Join(FormatDiagnostics(diags), "\n")
	for _, want := range []string{
		`p.hcl:10:7: Ambiguous service name: service "api.v2" has the cluster name of subset "v2" of service "api"; route to that subset with service = "api" and subset = "v2"`,
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("diagnostics lack %q:\n%s", want, lines)
		}
	}
	// Without the subset, a dotted name is just a name.
	ok := strings.Replace(src, "subset \"v2\" {\n    tags = [\"v2\"]\n  }\n", "", 1)
	doc, _ = Parse("p.hcl", []byte(ok))
	if _, diags := Merge(doc); diags.HasErrors() {
		t.Errorf("a dotted service name without a clashing subset: %v", diags)
	}
}

// TestUnqueryableServiceNames: names Consul's HTTP API cannot query (a
// slash, a tab, "..") are refused wherever the policy names a service, at
// the position of the name, since a watch on one could never be read.
func TestUnqueryableServiceNames(t *testing.T) {
	src := `service "a/b" {}
service "web" {
  consul_service = ".."
}
proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      route {
        match {
          path_prefix = "/x"
        }
        service = "bad\tname"
      }
      route {
        split {
          service = "ok"
          weight  = 1
        }
        split {
          service = "no way"
          weight  = 1
        }
      }
    }
  }
}
`
	doc, diags := Parse("p.hcl", []byte(src))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	_, diags = Merge(doc)
	lines := strings.Join(FormatDiagnostics(diags), "\n")
	for _, want := range []string{
		`p.hcl:1:1: Invalid service name: service "a/b": Consul's HTTP API cannot query this name`,
		`p.hcl:3:20: Invalid service name: service ".."`,
		`p.hcl:13:19: Invalid service name: service "bad\tname"`,
		`p.hcl:21:21: Invalid service name: service "no way"`,
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("diagnostics lack %q:\n%s", want, lines)
		}
	}
	if strings.Contains(lines, `"ok"`) {
		t.Errorf("a valid name was refused:\n%s", lines)
	}
}

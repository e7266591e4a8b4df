package pipeline

import (
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/policytest"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

func mustPolicy(t testing.TB, src string) *policy.Policy {
	t.Helper()
	return policytest.Policy(t, src)
}

// TestForkLeavesTheMemo: what a fork computes never reaches the memo it
// was forked from: computing the first policy again after a fork computed
// another finds every object it served before (a memo hit), while the
// fork itself remembers its own world.
func TestForkLeavesTheMemo(t *testing.T) {
	cat := consul.NewCatalog([]*consul.Service{{Name: "web", Instances: []consul.Instance{
		{ID: "web-1", Node: "n1", Address: "10.0.0.1", Port: 8080, Status: consul.StatusPassing},
	}}})
	p1 := mustPolicy(t, "export_all_services = true\nservice \"web\" {\n  connect_timeout = \"1s\"\n}\n")
	p2 := mustPolicy(t, "export_all_services = true\nservice \"web\" {\n  connect_timeout = \"2s\"\n}\n")
	memo := NewMemo()
	w1, err := Compute(Input{Catalog: cat, Policy: p1}, memo)
	if err != nil {
		t.Fatal(err)
	}
	fork := memo.Fork()
	w2, err := Compute(Input{Catalog: cat, Policy: p2}, fork)
	if err != nil {
		t.Fatal(err)
	}
	if w2.Output.Shared.Clusters[0] == w1.Output.Shared.Clusters[0] {
		t.Fatal("a changed cluster was served from the memo")
	}
	again, err := Compute(Input{Catalog: cat, Policy: p1}, memo)
	if err != nil {
		t.Fatal(err)
	}
	if again.Output.Shared.Clusters[0] != w1.Output.Shared.Clusters[0] {
		t.Error("the memo forgot its cluster after a fork computed another policy")
	}
	forkAgain, err := Compute(Input{Catalog: cat, Policy: p2}, fork)
	if err != nil {
		t.Fatal(err)
	}
	if forkAgain.Output.Shared.Clusters[0] != w2.Output.Shared.Clusters[0] {
		t.Error("the fork does not remember its own world")
	}
}

// TestCheckNamesTheRoute: Check reports a group Envoy would refuse at the
// route's position.
func TestCheckNamesTheRoute(t *testing.T) {
	pol := mustPolicy(t, `proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      domains = ["*"]
      route {
        match {
          path_prefix = "/"
        }
        service = "web"
        request_headers {
          set = { "x-a" = "a\nb" }
        }
      }
    }
  }
}
`)
	diags := Check(Input{Policy: pol})
	if !diags.HasErrors() || diags[0].Subject == nil || diags[0].Subject.Start.Line != 6 {
		t.Fatalf("diagnostics %v, want an error at the route on line 6", diags)
	}
}

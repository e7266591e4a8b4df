package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

const rolesPolicy = `
consul {
  address = "%CONSUL%"
}
export_all_services = true

service "web" {
  subset "v2" {
    tags = ["v2"]
  }
}

proxy "edge" {
  listener "http" {
    port = 8080
    virtual_host "all" {
      route {
        split {
          service = "web"
          weight  = 80
        }
        split {
          service = "web"
          subset  = "v2"
          weight  = 20
        }
      }
    }
  }
}
`

// section is the part of a plan's output about one role.
func section(out, title string) string {
	i := strings.Index(out, title)
	if i < 0 {
		return ""
	}
	rest := out[i:]
	if j := regexp.MustCompile(`\n\S`).FindStringIndex(rest[1:]); j != nil {
		return rest[:j[0]+1]
	}
	return rest
}

// TestPlanCoversEveryRole: against a running bridge with an Envoy of
// group edge connected, plan computes every role the daemon serves,
// whatever it prints:
//   - export_all_services = false removes the proxyless clients' API
//     listeners: exit 2, the removed listeners named (plan used to say
//     "No changes" and the demo's gRPC client then failed);
//   - 80/20 -> 50/50 shows both weights of both splits;
//   - a route to a new service plans the same for edge with and without
//     -cluster edge (it used to be "0 to add" without and "2 to add"
//     with), and a narrowed plan still exits 2 and says what it hides.
func TestPlanCoversEveryRole(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, []string{"v1"}, nil)
	agent.RegisterTTL(t, "web", "web-2", 1002, []string{"v2"}, nil)
	agent.RegisterTTL(t, "billing", "billing-1", 3001, nil, nil)
	dir := t.TempDir()
	src := strings.Replace(rolesPolicy, "%CONSUL%", agent.HTTPAddr(), 1)
	write := fileWriter(t, dir)
	file := write("config.hcl", src)
	d := runDaemon(t, file)
	admin := d.AdminAddr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	edge, err := adsclient.Dial(ctx, adsclient.Config{Addr: d.XDSAddr().String(), NodeID: "edge-1", Cluster: "edge"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = edge.Close() })
	if _, err := edge.Wait(ctx, func(s adsclient.State) bool { return s.RouteConfig("edge.http") != nil }); err != nil {
		t.Fatal(err)
	}
	plan := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := realMain(append([]string{"plan", "-admin", admin}, args...), &out, &errOut)
		return code, out.String() + errOut.String()
	}

	if code, out := plan("-config", file); code != 0 || !strings.Contains(out, `proxies with node.cluster "edge" (1 connected)`) {
		t.Fatalf("plan of the running policy: exit %d, want 0 with edge's connected proxy counted\n%s", code, out)
	}

	noExport := write("no-export.hcl", strings.Replace(src, "export_all_services = true", "export_all_services = false", 1))
	code, out := plan("-config", noExport)
	proxyless := section(out, "proxyless gRPC clients in no proxyless group:")
	// web stays: the policy names it.
	if code != 2 || !strings.Contains(proxyless, "- listener  billing") || strings.Contains(proxyless, "- listener  web") {
		t.Errorf("export_all_services = false: exit %d, want 2 naming the removed API listener of billing (not web's)\n%s", code, out)
	}

	fifty := write("fifty.hcl", strings.ReplaceAll(strings.ReplaceAll(src, "weight  = 80", "weight  = 50"), "weight  = 20", "weight  = 50"))
	code, out = plan("-config", fifty)
	for _, want := range []string{
		"~ route     edge.http",
		`~ virtual_hosts[0].routes[0].route.weighted_clusters.clusters[0].weight: 80 → 50`,
		`~ virtual_hosts[0].routes[0].route.weighted_clusters.clusters[1].weight: 20 → 50`,
		"reaching 1 connected proxies",
	} {
		if code != 2 || !strings.Contains(out, want) {
			t.Errorf("80/20 -> 50/50: exit %d, output lacks %q\n%s", code, want, out)
		}
	}

	billing := write("billing.hcl", strings.Replace(src, `    virtual_host "all" {
      route {`, `    virtual_host "all" {
      route {
        match {
          path_prefix = "/billing/"
        }
        service = "billing"
      }
      route {`, 1))
	codeAll, all := plan("-config", billing)
	codeEdge, onlyEdge := plan("-config", billing, "-cluster", "edge")
	want := section(all, `proxies with node.cluster "edge"`)
	if codeAll != 2 || codeEdge != 2 || want == "" || section(onlyEdge, `proxies with node.cluster "edge"`) != want ||
		!strings.Contains(want, "+ cluster   billing") || !strings.Contains(want, "+ endpoints billing") {
		t.Errorf("billing: exit %d and %d (-cluster edge); edge's part differs or lacks billing:\n--- all:\n%s\n--- -cluster edge:\n%s", codeAll, codeEdge, all, onlyEdge)
	}
	if strings.Contains(onlyEdge, "nodes in no group:") || !strings.Contains(onlyEdge, "Plan: ") {
		t.Errorf("-cluster edge prints other roles or no summary:\n%s", onlyEdge)
	}
}

package xds_test

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/golden"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/model"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// meshGRPCCasePrefix names the proxyless mesh's golden cases: each holds
// mesh.json (a model.MeshGRPC) and optionally base.txt, the model case
// (../model/testdata/NAME) whose model the mesh is added to.
const meshGRPCCasePrefix = "mesh_grpc_"

// TestMeshGRPCGolden adds each case's Connect-native gRPC services to a
// model (model.AddMeshGRPC), translates it and compares what proxyless
// gRPC nodes get — API and server listeners with their routes, clusters
// and endpoints — with the case's goldens. Translate has checked every
// resource with ValidateAll; the proxyless snapshot must be consistent
// and no Envoy view may hold a mesh gRPC cluster.
func TestMeshGRPCGolden(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", meshGRPCCasePrefix+"*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no mesh gRPC cases: %v", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var in model.MeshGRPC
			b, err := os.ReadFile(filepath.Join(dir, "mesh.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &in); err != nil {
				t.Fatal(err)
			}
			// Nodes in no group get every cluster: never a mesh gRPC one.
			m := &ir.Model{UnmatchedAll: true}
			if base, err := os.ReadFile(filepath.Join(dir, "base.txt")); err == nil {
				if m, err = golden.ReadModel(filepath.Join(modelCases, strings.TrimSpace(string(base)), golden.ModelFile)); err != nil {
					t.Fatal(err)
				}
			}
			warnings := model.AddMeshGRPC(m, in)
			out, err := xds.Translate(m)
			if err != nil {
				t.Fatalf("Translate: %v", err)
			}
			if len(out.Failed) > 0 || out.ProxylessFailed != nil {
				t.Fatalf("groups failed: %v, proxyless: %v", out.Failed, out.ProxylessFailed)
			}
			if err := xds.Consistent(out.Shared, out.Proxyless); err != nil {
				t.Errorf("proxyless snapshot not consistent: %v", err)
			}
			if err := xds.Consistent(out.Shared, out.ProxylessReach); err != nil {
				t.Errorf("proxyless reach not consistent: %v", err)
			}
			for _, c := range out.Unmatched.Clusters {
				if strings.HasPrefix(c.GetName(), ir.MeshGRPCClusterPrefix) {
					t.Errorf("nodes in no group (Envoys) get mesh gRPC cluster %q", c.GetName())
				}
			}
			for g, r := range out.Reach {
				if out.ProxylessGroups[g] {
					continue
				}
				for _, c := range r.Clusters {
					if strings.HasPrefix(c.GetName(), ir.MeshGRPCClusterPrefix) {
						t.Errorf("Envoy group %q gets mesh gRPC cluster %q", g, c.GetName())
					}
				}
			}
			pl := out.Proxyless.ByType()
			reach := out.ProxylessReach.ByType()
			compareGolden(t, filepath.Join(dir, "proxyless.golden.json"),
				marshalResources(t, append(pl[resourcev3.ListenerType], pl[resourcev3.RouteType]...)))
			compareGolden(t, filepath.Join(dir, "cds.golden.json"), marshalResources(t, reach[resourcev3.ClusterType]))
			compareGolden(t, filepath.Join(dir, "eds.golden.json"), marshalResources(t, reach[resourcev3.EndpointType]))
			compareGolden(t, filepath.Join(dir, "warnings.golden.txt"), []byte(strings.Join(append(warnings, ""), "\n")))
			// Each instance's listener, and the wildcard ones of its port.
			served := map[string]bool{}
			for _, l := range pl[resourcev3.ListenerType] {
				served[xds.ResourceName(l)] = true
			}
			for i := range m.MeshGRPCServers {
				s := m.MeshGRPCServers[i]
				names := []string{s.ListenerName()}
				for _, wa := range []string{"0.0.0.0", "::"} {
					names = append(names, (&ir.MeshGRPCServer{Address: netip.MustParseAddr(wa), Port: s.Port}).ListenerName())
				}
				for _, n := range names {
					if !served[n] {
						t.Errorf("server listener %q is not served", n)
					}
				}
			}
		})
	}
}

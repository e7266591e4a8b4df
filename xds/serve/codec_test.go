package serve

import (
	"bytes"
	"context"
	"slices"
	"testing"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
)

// TestFanOutSharesOneEncodingPerView: over real gRPC, the proxies of one
// group receive a flip from one shared encoding (SotW and delta), hold
// identical state, and the other group's proxies get only their own
// view: sharing never crosses groups.
func TestFanOutSharesOneEncodingPerView(t *testing.T) {
	s := startServer(t, ServerConfig{})
	if _, err := s.Update(context.Background(), twoGroups(t, "a", "c"), resolveAB); err != nil {
		t.Fatal(err)
	}
	var as, bs []*adsclient.Client
	for _, mode := range []adsclient.Mode{adsclient.SotW, adsclient.Delta} {
		for _, id := range []string{"1", "2", "3"} {
			as = append(as, dial(t, s, adsclient.Config{NodeID: "a-" + mode.String() + id, Cluster: "a", Mode: mode}))
			bs = append(bs, dial(t, s, adsclient.Config{NodeID: "b-" + mode.String() + id, Cluster: "b", Mode: mode}))
		}
	}
	synced := func(st adsclient.State) bool {
		return len(st.LoadAssignmentNames()) > 0 && len(st.RouteConfigNames()) > 0
	}
	for _, c := range append(slices.Clone(as), bs...) {
		if _, err := c.Wait(waitCtx(t), synced); err != nil {
			t.Fatal(err)
		}
	}
	before := cache.SharedSends()
	// A flip of a's endpoint: the "a" CLA changes, for group a only.
	m := twoGroupsModel("a", "c")
	m.Clusters[0].Endpoints[0].Health = ir.Unhealthy
	flipped, err := xds.Translate(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(context.Background(), flipped, resolveAB); err != nil {
		t.Fatal(err)
	}
	want := flipped.Shared.ByType()[resourcev3.EndpointType]
	var wantA []byte
	for _, r := range want {
		if xds.ResourceName(r) == "a" {
			wantA = deterministic(t, r)
		}
	}
	for _, c := range as {
		st, err := c.Wait(waitCtx(t), func(st adsclient.State) bool {
			cla := st.Types[adsclient.EndpointType].Resources["a"]
			return cla != nil && bytes.Equal(deterministic(t, cla), wantA)
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := st.ClusterNames(); !slices.Equal(got, []string{"a", "c"}) {
			t.Errorf("group a proxy holds clusters %v", got)
		}
	}
	// 6 proxies of a: one SotW and one delta encoding, each sent 3 times.
	if n := cache.SharedSends() - before; n < 6 {
		t.Errorf("%d flip responses sent from shared encodings, want ≥ 6", n)
	}
	for _, c := range bs {
		st := c.Snapshot()
		if got := st.LoadAssignmentNames(); !slices.Equal(got, []string{"b"}) {
			t.Errorf("group b proxy holds endpoints %v", got)
		}
		if got := st.ClusterNames(); !slices.Equal(got, []string{"b"}) {
			t.Errorf("group b proxy holds clusters %v", got)
		}
	}
}

func deterministic(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

package cache

import (
	"fmt"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/envoynode"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/envoycompat"
)

// TestKeyIsBuiltOnce: a node's key is its node.cluster, marked for a
// proxyless client and followed by an older Envoy's class; a key that is
// built is built once, not at every request, and a client cannot make the
// interned keys grow past their bound however many node.clusters it
// sends, nor keep a long one.
func TestKeyIsBuiltOnce(t *testing.T) {
	old := envoynode.New("sidecar-1", "web") // Envoy 1.25
	class := envoycompat.ClassOfNode(old)
	if class.Current() {
		t.Fatal("the test's Envoy is of the current class")
	}
	if got, want := Key(old), "web"+classSep+class.String(); got != want {
		t.Errorf("an older Envoy's key %q, want %q", got, want)
	}
	grpc := &corev3.Node{Id: "g", Cluster: "web", UserAgentName: "grpc-go"}
	if got := Key(grpc); got != proxylessKey+"web" {
		t.Errorf("a proxyless client's key %q", got)
	}
	if got := Key(&corev3.Node{Id: "n", Cluster: "web"}); got != "web" {
		t.Errorf("a node announcing no version: key %q, want its node.cluster", got)
	}
	for _, n := range []*corev3.Node{old, grpc} {
		if a := testing.AllocsPerRun(100, func() { _ = Key(n) }); a != 0 {
			t.Errorf("Key(%s) took %v allocations a call, want 0", n.GetUserAgentName(), a)
		}
	}

	long := envoynode.New("x", strings.Repeat("c", maxInternedCluster+1))
	if got, want := Key(long), long.GetCluster()+classSep+class.String(); got != want {
		t.Errorf("a long node.cluster's key is wrong")
	}
	for i := range 2 * maxBuiltKeys {
		n := envoynode.New("x", fmt.Sprintf("hostile-%d", i))
		if got, want := Key(n), n.GetCluster()+classSep+class.String(); got != want {
			t.Fatalf("key %q, want %q", got, want)
		}
	}
	builtKeys.Lock()
	defer builtKeys.Unlock()
	if n := len(builtKeys.m); n > maxBuiltKeys {
		t.Errorf("%d keys interned, over the bound %d", n, maxBuiltKeys)
	}
	for k := range builtKeys.m {
		if len(k.cluster) > maxInternedCluster {
			t.Errorf("a node.cluster of %d bytes was interned", len(k.cluster))
		}
	}
}

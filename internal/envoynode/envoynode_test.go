package envoynode

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

// TestNodeIsAsLargeAsAnEnvoys: the node stands for a real Envoy's only if
// it is about as large (11–24 KiB reported) and its extensions are
// distinct, as a build's factories are.
func TestNodeIsAsLargeAsAnEnvoys(t *testing.T) {
	n := New("web-1-sidecar-proxy", "web")
	if size := proto.Size(n); size < 11<<10 || size > 32<<10 {
		t.Errorf("node is %d bytes, want an Envoy's 11–32 KiB", size)
	}
	seen := map[string]bool{}
	for _, e := range n.GetExtensions() {
		if seen[e.GetName()] {
			t.Errorf("extension %s listed twice", e.GetName())
		}
		seen[e.GetName()] = true
	}
	if n.GetId() != "web-1-sidecar-proxy" || n.GetCluster() != "web" || n.GetUserAgentName() != "envoy" {
		t.Errorf("node identity %q/%q/%q", n.GetId(), n.GetCluster(), n.GetUserAgentName())
	}
}

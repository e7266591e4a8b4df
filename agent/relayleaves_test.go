package agent

import (
	"testing"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestRelayHoldsNoLeafBytes: a leaf-named secret the central bridge sent
// is dropped from the bytes the relay keeps as from what it holds
// (a private key the relay never serves is not kept either); other
// secrets and other types are kept as they came.
func TestRelayHoldsNoLeafBytes(t *testing.T) {
	leaf, roots := LeafSecretPrefix+"api", RootsSecretName
	enc := map[string]*anypb.Any{leaf: {Value: []byte("PRIVATE")}, roots: {Value: []byte("roots")}}
	got := withoutRelayedLeaves(resourcev3.SecretType, enc)
	if _, ok := got[leaf]; ok || got[roots] == nil || len(got) != 1 {
		t.Errorf("kept %v; want only %s", got, roots)
	}
	if enc[leaf] == nil {
		t.Error("the client's own map was edited")
	}
	if other := withoutRelayedLeaves(resourcev3.ClusterType, enc); len(other) != 2 {
		t.Errorf("a cluster map lost entries: %v", other)
	}
}

package serve

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// TestRelayedEnvoysBounded: what a relay stream reports of the Envoys
// behind it is shown as reported, and a hostile report (many huge
// entries) is cut to maxRelayedEnvoys entries of bounded size plus a
// count of the rest.
func TestRelayedEnvoysBounded(t *testing.T) {
	node := func(v string) *corev3.Node {
		return &corev3.Node{Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{xds.RelayedEnvoysMetadata: structpb.NewStringValue(v)}}}
	}
	if got := relayedEnvoys(node("a@1.22,b@1.40")); strings.Join(got, " ") != "a@1.22 b@1.40" {
		t.Errorf("relayed %q, want a@1.22 b@1.40", got)
	}
	if got := relayedEnvoys(&corev3.Node{}); got != nil {
		t.Errorf("a node without the key: %q", got)
	}
	huge := strings.Repeat(strings.Repeat("x", 10_000)+"@1.22,", 1000)
	got := relayedEnvoys(node(huge))
	if len(got) != maxRelayedEnvoys+1 || got[maxRelayedEnvoys] != "(968 more)" {
		t.Fatalf("%d entries, last %q; want %d and a count of the rest", len(got), got[len(got)-1], maxRelayedEnvoys+1)
	}
	for _, e := range got[:maxRelayedEnvoys] {
		if len(e) > maxRelayedEnvoyBytes+len("…") {
			t.Fatalf("an entry of %d bytes", len(e))
		}
	}
}

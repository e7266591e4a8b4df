package serve

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/envoycompat"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
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

// TestRelayKeyDroppedForgetsItsSets: a relay key that stops being served
// (its last local proxy left) takes its chains with it, and so the
// resources they were built from, its upstreams' private keys among them.
// Update, which drops unused chains, never runs in relay mode: before,
// an agent held the last sets of every node.cluster it ever relayed.
// Another key's sets stay.
func TestRelayKeyDroppedForgetsItsSets(t *testing.T) {
	s := NewServer(ServerConfig{Relay: true, Logger: zerolog.Nop()})
	res := func(name string) *xds.Resources {
		return &xds.Resources{Secrets: []*tlsv3.Secret{{Name: name + "-leaf", Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			PrivateKey: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "key of " + name}}}}}}}
	}
	// "a\x00x" shares a's chain prefix: a node.cluster may hold any byte.
	for _, k := range []string{"a", "b", "a\x00x"} {
		if _, err := s.SetRelay(k, res(k)); err != nil {
			t.Fatal(err)
		}
	}
	held := func(key string) (chains, froms int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for c := range s.chains {
			if chainOfRole(c, relayRole(key)) {
				chains++
			}
		}
		for c := range s.chainFrom {
			if chainOfRole(c, relayRole(key)) {
				froms++
			}
		}
		return chains, froms
	}
	s.mu.Lock()
	for _, k := range []string{"a", "b", "a\x00x"} {
		if _, err := s.relaySetsLocked(k); err != nil {
			s.mu.Unlock()
			t.Fatal(err)
		}
	}
	s.mu.Unlock()
	if c, f := held("a"); c == 0 || f == 0 {
		t.Fatalf("relay key a holds %d chains (%d sources) after its sets were built; the test sees nothing", c, f)
	}
	if _, err := s.SetRelay("a", nil); err != nil {
		t.Fatal(err)
	}
	if c, f := held("a"); c != 0 || f != 0 {
		t.Errorf("relay key a, no longer served, still holds %d chains and %d sources (its private key with them)", c, f)
	}
	for _, k := range []string{"b", "a\x00x"} {
		if c, _ := held(k); c == 0 {
			t.Errorf("relay key %q lost its sets when a was dropped", k)
		}
	}
}

// TestChainOfRole: a role's chains, current and older classes alike, are
// its own; another role that starts with it and a NUL is not.
func TestChainOfRole(t *testing.T) {
	old := envoycompat.ClassOf(envoycompat.Version{Major: 1, Minor: 22})
	if old.Current() {
		t.Fatal("1.22 is the current class: pick an older Envoy")
	}
	for _, tc := range []struct {
		chain, role string
		want        bool
	}{
		{chainName("relay/a", cache.TypeOrder[0], envoycompat.Class{}), "relay/a", true},
		{chainName("relay/a", cache.TypeOrder[1], old), "relay/a", true},
		{chainName("relay/a\x00x", cache.TypeOrder[0], envoycompat.Class{}), "relay/a", false},
		{chainName("relay/ab", cache.TypeOrder[0], envoycompat.Class{}), "relay/a", false},
		{chainName("relay/a", cache.TypeOrder[0], envoycompat.Class{}), "relay/a\x00x", false},
	} {
		if got := chainOfRole(tc.chain, tc.role); got != tc.want {
			t.Errorf("chainOfRole(%q, %q) = %v, want %v", tc.chain, tc.role, got, tc.want)
		}
	}
}

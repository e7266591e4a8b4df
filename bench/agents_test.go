package bench

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestAgentTierSockets: startAgents runs m real agents, each on a socket
// of its own, and proxy k goes to agent k/K: the fleet's first K proxies
// share the first agent, the next K the second.
func TestAgentTierSockets(t *testing.T) {
	tier, err := startAgents(context.Background(), t.TempDir(), 3, []string{"127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.stop()
	if len(tier.sockets) != 3 {
		t.Fatalf("%d sockets, want 3", len(tier.sockets))
	}
	for _, s := range tier.sockets {
		if fi, err := os.Stat(strings.TrimPrefix(s, "unix://")); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Errorf("agent socket %s: %v %v", s, fi, err)
		}
	}
	addr := tier.addrOf(2)
	for k, want := range []int{0, 0, 1, 1, 2, 2, 0} {
		if got := addr(k); got != tier.sockets[want] {
			t.Errorf("proxy %d goes to %s, want agent %d's %s", k, got, want, tier.sockets[want])
		}
	}
	if _, err := startAgents(context.Background(), t.TempDir(), 0, nil); err == nil {
		t.Error("a tier of 0 agents started")
	}
}

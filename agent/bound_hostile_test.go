package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// servedBy waits until a local proxy of group holds its listener.
func servedBy(t *testing.T, ag *runningAgent, group string) {
	t.Helper()
	c := dial(t, "unix://"+ag.SocketAddr().String(), group, adsclient.Delta)
	wait(t, c, group+"'s listener through the agent", 20*time.Second, func(s adsclient.State) bool { return s.Listener(group+".http") != nil })
	_ = c.Close()
}

// TestAgentBoundNeverLocksOutUsedGroups (issue 36, 9): 64 groups claimed
// once through a pattern and left (lingering for 10 minutes) lock out
// neither a group the config names exactly nor a new pattern group, and
// neither does the same set restored from disk after a restart.
func TestAgentBoundNeverLocksOutUsedGroups(t *testing.T) {
	cen := startStandIn(t, nil, bigWorld(10, 1001))
	dir := t.TempDir()
	ag := startAgent(t, dir, cen.addr) // allow_groups "web", "edge-*"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var flood []*adsclient.Client
	for i := range 64 {
		c, err := adsclient.Dial(ctx, adsclient.Config{Addr: "unix://" + ag.SocketAddr().String(), NodeID: "p", Cluster: fmt.Sprintf("edge-%d", i), Mode: adsclient.Delta})
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	for _, c := range flood {
		if _, err := c.Wait(ctx, func(s adsclient.State) bool { return len(s.Names(adsclient.ListenerType)) == 1 }); err != nil {
			t.Fatal(err)
		}
	}
	// 64 pattern groups in use: a group the config names is not counted;
	// a 65th pattern group is refused, saying why.
	servedBy(t, ag, "web")
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: "unix://" + ag.SocketAddr().String(), NodeID: "p", Cluster: "edge-65", Mode: adsclient.Delta})
	if err != nil {
		t.Fatal(err)
	}
	<-c.Done()
	if status.Code(c.Err()) != codes.PermissionDenied || !strings.Contains(c.Err().Error(), "list the groups this host uses exactly in allow_groups") {
		t.Fatalf("the 65th pattern group: %v", c.Err())
	}
	for _, c := range flood {
		_ = c.Close()
	}
	// Left, they linger: a new group makes one of them go. A client's
	// Close returns before the agent has seen its stream end, so the
	// test waits until it has (until then the bound rightly refuses).
	for deadline := time.Now().Add(10 * time.Second); ag.IdleRelays() < len(flood); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d closed groups' relays linger after 10s", ag.IdleRelays(), len(flood))
		}
	}
	servedBy(t, ag, "edge-real")

	ag.stop()
	ag = startAgent(t, dir, cen.addr)
	if n := len(readyzKeys(t, ag)); n < 64 {
		t.Fatalf("%d groups restored, want at least 64 (the test would not fill the bound)", n)
	}
	servedBy(t, ag, "edge-after-restart")
	servedBy(t, ag, "web")
}

// TestAgentRefusesGroupTheCentralRefuses (issue 36, 9): a group allowed
// here that the central bridge refuses to this agent (its certificate does
// not cover it) is refused to its local proxy with the central's reason,
// at once, not left hanging; the agent stays ready for its other groups
// and lists the refusal.
func TestAgentRefusesGroupTheCentralRefuses(t *testing.T) {
	cen := startStandIn(t, func(n *corev3.Node) error {
		if n.GetCluster() == "edge-denied" {
			return errors.New("certificate spiffe://example.org/group/web does not authorize node \"vm-1\" in group \"edge-denied\"")
		}
		return nil
	}, bigWorld(10, 1001))
	ag := startAgent(t, t.TempDir(), cen.addr)
	servedBy(t, ag, "web")
	for attempt := range 2 { // the first while the relay learns it, the second at once
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		c, err := adsclient.Dial(ctx, adsclient.Config{Addr: "unix://" + ag.SocketAddr().String(), NodeID: "p", Cluster: "edge-denied", Mode: adsclient.Delta})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-c.Done():
		case <-ctx.Done():
			t.Fatalf("attempt %d: a proxy of a group the central refuses was left hanging", attempt)
		}
		cancel()
		if status.Code(c.Err()) != codes.PermissionDenied || !strings.Contains(c.Err().Error(), "does not authorize node") || !strings.Contains(c.Err().Error(), "cert_file") {
			t.Fatalf("attempt %d: refused with %v, want PermissionDenied with the central's reason and what to do", attempt, c.Err())
		}
		_ = c.Close()
	}
	resp, err := http.Get("http://" + ag.AdminAddr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var rz struct {
		Status string `json:"status"`
		Keys   []struct {
			NodeCluster string `json:"node_cluster"`
			Refused     string `json:"refused"`
		} `json:"node_clusters"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&rz)
	resp.Body.Close()
	refused := false
	for _, k := range rz.Keys {
		refused = refused || (k.NodeCluster == "edge-denied" && strings.Contains(k.Refused, "does not authorize"))
	}
	if resp.StatusCode != 200 || !refused {
		t.Errorf("/readyz %d %+v, want ready with edge-denied listed as refused", resp.StatusCode, rz)
	}
}

// TestAgentWarnsOnWorldOpenSocket (issue 36, 10): a socket mode that lets
// every local user connect is warned about at start, naming the setting.
func TestAgentWarnsOnWorldOpenSocket(t *testing.T) {
	for mode, warn := range map[uint32]bool{0o666: true, 0o777: true, 0o660: false, 0o600: false} {
		t.Run(fmt.Sprintf("%04o", mode), func(t *testing.T) {
			var logs syncbuffer.Buffer
			ag := startAgentWith(t, t.TempDir(), func(c *agent.Config) { c.SocketMode = osMode(mode) }, &logs)
			ag.stop()
			got := strings.Contains(logs.String(), "lets every local user connect") && strings.Contains(logs.String(), `"socket_mode":"`+fmt.Sprintf("%04o", mode))
			if got != warn {
				t.Errorf("warned %v, want %v:\n%s", got, warn, logs.String())
			}
		})
	}
}

func osMode(m uint32) os.FileMode { return os.FileMode(m) }

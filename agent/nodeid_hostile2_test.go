package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestAgentAllowNodeIDsRefusesOtherIDs: with allow_node_ids ["envoy-1"],
// a local proxy of an allowed group claiming node id envoy-2 is refused
// with PermissionDenied naming the setting and makes the agent relay
// nothing; envoy-1 of the same group is served its config.
func TestAgentAllowNodeIDsRefusesOtherIDs(t *testing.T) {
	cen := startStandIn(t, nil, bigWorld(10, 1001))
	ag := startAgentWith(t, t.TempDir(), func(c *agent.Config) {
		c.Upstreams = []string{cen.addr}
		c.AllowNodeIDs = []string{"envoy-1"}
	})
	sock := "unix://" + ag.SocketAddr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	intruder, err := adsclient.Dial(ctx, adsclient.Config{Addr: sock, NodeID: "envoy-2", Cluster: "edge-a", Mode: adsclient.Delta})
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Close()
	// Served (a listener arrives) or refused (the stream ends), whichever
	// comes first: a regression fails fast instead of at the timeout.
	if st, err := intruder.Wait(ctx, func(s adsclient.State) bool { return s.Listener("edge-a.http") != nil }); err == nil {
		t.Fatalf("node id envoy-2 was served: %v", st)
	}
	if err := intruder.Err(); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "allow_node_ids") {
		t.Fatalf("envoy-2 refused with %v, want PermissionDenied naming allow_node_ids", err)
	}
	if n := len(intruder.Snapshot().ListenerNames()) + len(intruder.Snapshot().ClusterNames()); n != 0 {
		t.Fatalf("refused envoy-2 received %d resources", n)
	}
	if n := len(ag.Server().RelayKeys()); n != 0 {
		t.Fatalf("a refused node made the agent relay %d keys", n)
	}

	ok, err := adsclient.Dial(ctx, adsclient.Config{Addr: sock, NodeID: "envoy-1", Cluster: "edge-a", Mode: adsclient.Delta})
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	wait(t, ok, "envoy-1's listener through the agent", 10*time.Second, func(s adsclient.State) bool { return s.Listener("edge-a.http") != nil })
}

// TestAgentStateFilesAreOwnerOnly: once the agent has saved a relayed
// node.cluster's last good config (which may hold private keys), its
// node-*.pb file is mode 0600 and the data directory it created 0700, so
// no other local user can read them.
func TestAgentStateFilesAreOwnerOnly(t *testing.T) {
	cen := startStandIn(t, nil, bigWorld(10, 1001))
	dir := t.TempDir()
	ag := startAgent(t, dir, cen.addr)
	proxy := dial(t, "unix://"+ag.SocketAddr().String(), "edge-a", adsclient.Delta)
	wait(t, proxy, "the config through the agent", 10*time.Second, func(s adsclient.State) bool { return s.Listener("edge-a.http") != nil })

	data := filepath.Join(dir, "data")
	var files []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if files, _ = filepath.Glob(filepath.Join(data, "node-*.pb")); len(files) > 0 {
			break
		}
	}
	if len(files) == 0 {
		t.Fatalf("no node-*.pb saved in %s", data)
	}
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %04o, want 0600", filepath.Base(f), fi.Mode().Perm())
		}
	}
	fi, err := os.Stat(data)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("data_dir %s: mode %04o, want 0700", data, fi.Mode().Perm())
	}
}

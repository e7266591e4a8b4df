package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestAgentRefusesOtherGroups: a local process claiming a node.cluster
// the agent's allow_groups do not list is refused with PermissionDenied,
// saying why; no central bridge is needed for that.
func TestAgentRefusesOtherGroups(t *testing.T) {
	ag := startAgent(t, t.TempDir(), "127.0.0.1:1") // nothing listens there
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: "unix://" + ag.SocketAddr().String(), NodeID: "intruder", Cluster: "payments", Mode: adsclient.Delta})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("a node claiming another group was not refused")
	}
	if status.Code(c.Err()) != codes.PermissionDenied || !strings.Contains(c.Err().Error(), `"payments" is not allowed on this host`) {
		t.Fatalf("refused with %v, want PermissionDenied naming the group", c.Err())
	}
	if n := len(ag.Server().RelayKeys()); n != 0 {
		t.Fatalf("a refused node made the agent relay %d keys", n)
	}
}

// TestSocketPermissions: with socket_mode 0660 and a socket_group, a
// process of another user in that group connects and one outside it is
// refused by the socket's mode. Needs root (to run the clients as other
// users), as CI is.
func TestSocketPermissions(t *testing.T) {
	if os.Getenv("AGENT_SOCKET_PROBE") != "" {
		return // the probe child, see probe below
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root; this test needs it to start clients as other users")
		}
		t.Skip("needs root to run clients as other users")
	}
	// t.TempDir's parent is 0700: other users could not reach the socket.
	dir, err := os.MkdirTemp("", "agent-socket-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The probe runs this test binary as another user: a copy it can read.
	bin := filepath.Join(dir, "probe.test")
	if err := copyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	const group = 4242 // numeric: no /etc/group entry needed
	ag := startAgentWith(t, dir, func(c *agentConfig) { c.SocketGroup = "4242" })
	sock := ag.SocketAddr().String()
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o660 || fi.Sys().(*syscall.Stat_t).Gid != group {
		t.Fatalf("socket mode %v gid %d, want 0660 and group %d", fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Gid, group)
	}
	if err := probe(t, bin, sock, 65534, group, []uint32{group}); err != nil {
		t.Fatalf("a user in the socket's group could not connect: %v", err)
	}
	if err := probe(t, bin, sock, 65534, 65534, nil); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("a user outside the socket's group: %v, want permission denied", err)
	}
}

// probe connects to sock as uid/gid in a child process (this test binary).
func probe(t *testing.T, bin, sock string, uid, gid uint32, groups []uint32) error {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^TestSocketProbe$")
	cmd.Env = append(os.Environ(), "AGENT_SOCKET_PROBE="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// TestSocketProbe is the child of probe: it connects and exits.
func TestSocketProbe(t *testing.T) {
	sock := os.Getenv("AGENT_SOCKET_PROBE")
	if sock == "" {
		t.Skip("only run by TestSocketPermissions")
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestAgentBoundsRelayedGroups: local processes choose node.cluster, so
// the number the agent relays is bounded; past it a new one is refused.
func TestAgentBoundsRelayedGroups(t *testing.T) {
	ag := startAgentWith(t, t.TempDir(), func(c *agentConfig) { c.AllowGroups = []string{"*"} })
	sock := "unix://" + ag.SocketAddr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 64 {
		c, err := adsclient.Dial(ctx, adsclient.Config{Addr: sock, NodeID: "p", Cluster: fmt.Sprintf("g-%d", i), Mode: adsclient.Delta})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	for deadline := time.Now().Add(10 * time.Second); len(readyzKeys(t, ag)) < 64; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d groups relayed, want 64", len(readyzKeys(t, ag)))
		}
	}
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: sock, NodeID: "p", Cluster: "one-too-many", Mode: adsclient.Delta})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the 65th node.cluster was not refused")
	}
	if status.Code(c.Err()) != codes.PermissionDenied || !strings.Contains(c.Err().Error(), "its limit") {
		t.Fatalf("refused with %v", c.Err())
	}
}

func readyzKeys(t *testing.T, a *runningAgent) []any {
	var body struct {
		NodeClusters []any `json:"node_clusters"`
	}
	if err := json.Unmarshal([]byte(readyz(t, a)), &body); err != nil {
		t.Fatal(err)
	}
	return body.NodeClusters
}

package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// secretsAnswer is what a local client got when it asked for secrets by
// name: the names it received, or the status its stream ended with.
type secretsAnswer struct {
	Got  []string `json:"got"`
	Code string   `json:"code,omitempty"`
	Err  string   `json:"err,omitempty"`
}

// askSecrets subscribes to names over a delta ADS stream at target as
// node id/cluster, and collects what it is sent for within (or until every
// name came, or the stream ended).
func askSecrets(target, id, cluster string, names []string, within time.Duration) secretsAnswer {
	var ans secretsAnswer
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return secretsAnswer{Err: err.Error()}
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err == nil {
		err = s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: id, Cluster: cluster}, TypeUrl: resourcev3.SecretType, ResourceNamesSubscribe: names})
	}
	for err == nil && len(ans.Got) < len(names) {
		var resp *discoveryv3.DeltaDiscoveryResponse
		if resp, err = s.Recv(); err != nil {
			break
		}
		for _, r := range resp.GetResources() {
			ans.Got = append(ans.Got, r.GetName())
		}
		err = s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.SecretType, ResponseNonce: resp.GetNonce()})
	}
	// Time up is no answer: the server may see the deadline (grpc-timeout)
	// and end the stream just before ctx does.
	if err != nil && ctx.Err() == nil && status.Code(err) != codes.DeadlineExceeded {
		ans.Code, ans.Err = status.Code(err).String(), err.Error()
	}
	slices.Sort(ans.Got)
	return ans
}

// TestLeafProbe is the child askAs starts as another user: it asks and
// prints its answer. A memory cap bounds what a misbehaving answer costs.
func TestLeafProbe(t *testing.T) {
	target := os.Getenv("AGENT_LEAF_PROBE")
	if target == "" {
		t.Skip("only run by askAs")
	}
	debug.SetMemoryLimit(64 << 20)
	var q struct {
		ID, Cluster string
		Names       []string
	}
	if err := json.Unmarshal([]byte(os.Getenv("AGENT_LEAF_PROBE_QUERY")), &q); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(askSecrets(target, q.ID, q.Cluster, q.Names, 4*time.Second))
	fmt.Printf("PROBE-ANSWER %s\n", b)
}

// askAs runs askSecrets in a child process (this test binary, bin) as
// uid/gid, so the agent sees another SO_PEERCRED.
func askAs(t *testing.T, bin, target string, uid, gid uint32, id, cluster string, names []string) secretsAnswer {
	t.Helper()
	q, _ := json.Marshal(map[string]any{"ID": id, "Cluster": cluster, "Names": names})
	cmd := exec.Command(bin, "-test.run=^TestLeafProbe$", "-test.v")
	cmd.Env = append(os.Environ(), "AGENT_LEAF_PROBE="+target, "AGENT_LEAF_PROBE_QUERY="+string(q), "GOMEMLIMIT=64MiB")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe as uid %d: %v\n%s", uid, err, out)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "PROBE-ANSWER "); ok {
			var ans secretsAnswer
			if err := json.Unmarshal([]byte(rest), &ans); err != nil {
				t.Fatal(err)
			}
			return ans
		}
	}
	t.Fatalf("probe as uid %d printed no answer:\n%s", uid, out)
	return secretsAnswer{}
}

// startMeshCentral runs a central bridge with a mesh policy in agent
// mode (default intention allow: it holds no key) against ca and
// returns its xDS address.
func startMeshCentral(t *testing.T, ca *consultest.Agent) string {
	t.Helper()
	_, addr := startMeshCentralDaemon(t, ca)
	return addr
}

// startMeshCentralDaemon is startMeshCentral, with the bridge.
func startMeshCentralDaemon(t *testing.T, ca *consultest.Agent) (*bridge.Daemon, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "central.hcl")
	if err := os.WriteFile(file, []byte("mesh {\n  default_intention = \"allow\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return startCentralWithPolicy(t, ca, file)
}

// startCentralWithPolicy runs a central bridge with the policy file against ca and
// returns it and its xDS address.
func startCentralWithPolicy(t testing.TB, ca *consultest.Agent, file string) (*bridge.Daemon, string) {
	t.Helper()
	cfg, _, diags := policy.LoadFiles(file)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	s := policy.DefaultSettings()
	s.Consul.Address, s.XDS.Listen, s.Admin.Listen = ca.HTTPAddr(), freeAddr(t), "127.0.0.1:0"
	d := bridge.New(bridge.Config{Settings: s, Policy: cfg.Policy, ConfigFiles: []string{file}, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
		Query: consul.QueryOptions{BackoffInitial: 100 * time.Millisecond, BackoffMax: time.Second}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-d.Started()
	return d, s.XDS.Listen
}

// probeDir is a directory other users can reach, holding a copy of this
// test binary they can run.
func probeDir(t *testing.T) (dir, bin string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root; this test needs it to start clients as other users")
		}
		t.Skip("needs root to run clients as other users")
	}
	dir, err := os.MkdirTemp("", "agent-leaf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "probe.test")
	if err := copyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	return dir, bin
}

// metricValue reads one sample from the agent's /metrics.
func metricValue(t *testing.T, a *runningAgent, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + a.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in /metrics", series)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// TestAgentServesEachLeafOnlyToItsProxy (issue 36, 1): with two connect
// services on the VM, a local proxy gets only the leaf of the service it
// acts for (its registered sidecar, or a group mapped to the service),
// only as an allowed user, and never over TCP; asking by name for another
// leaf gets nothing and is counted. The socket is 0666 here, so the
// socket's mode is not what stops anyone.
func TestAgentServesEachLeafOnlyToItsProxy(t *testing.T) {
	dir, bin := probeDir(t)
	ca := consultest.Start(t)
	ca.RegisterWebAPIMesh(t)
	central := startMeshCentral(t, ca)
	var logs syncbuffer.Buffer
	ag := startAgentWith(t, dir, func(c *agent.Config) {
		c.Upstreams, c.ConsulAddress = []string{central}, ca.HTTPAddr()
		c.ConnectServices = []string{"web", "api"}
		c.AllowGroups = []string{"web-edge", "other"}
		c.SocketMode, c.TCP = 0o666, "127.0.0.1:0"
		c.Leaf = map[string]agent.LeafAccess{"web": {ProxyGroups: []string{"web-edge"}, Users: []string{"0"}}}
	}, &logs)
	sock, tcp := "unix://"+ag.SocketAddr().String(), ag.TCPAddr().String()
	web, api, roots := agent.LeafSecretPrefix+"web", agent.LeafSecretPrefix+"api", agent.RootsSecretName
	all := []string{web, api, roots}

	// Allowed proxies first: they wait for the leaves to exist, so the
	// refusals below are not an agent that has nothing yet.
	for name, tc := range map[string]struct{ id, cluster string }{
		"web's sidecar":         {"web-sidecar-proxy", "web"},
		"a group mapped to web": {"edge-1", "web-edge"},
	} {
		ans := askSecrets(sock, tc.id, tc.cluster, []string{web, roots}, 45*time.Second)
		if !slices.Equal(ans.Got, []string{web, roots}) {
			t.Fatalf("%s got %+v, want web's leaf and the roots", name, ans)
		}
	}

	t.Run("cases", func(t *testing.T) { leafCases(t, bin, sock, tcp, all) })

	// Counted: api's leaf asked for by web's two proxies, both leaves by
	// the two others; three peers refused, and one over TCP.
	if n := metricValue(t, ag, `consul_xds_bridge_agent_leaf_refusals_total{reason="not_acting_for_service"}`); n != 6 {
		t.Errorf("%v requests for another service's leaf counted, want 6 (each name once per stream)", n)
	}
	if n := metricValue(t, ag, `consul_xds_bridge_agent_leaf_refusals_total{reason="peer_not_allowed"}`); n != 3 {
		t.Errorf("%v refused peers counted, want 3", n)
	}
	if n := metricValue(t, ag, `consul_xds_bridge_agent_leaf_refusals_total{reason="no_peer_credentials"}`); n != 1 {
		t.Errorf("%v refused TCP streams counted, want 1", n)
	}
	restGetsNoKey(t, ag, web, api)
	if strings.Contains(logs.String(), "PRIVATE KEY") {
		t.Fatal("a private key is in the agent's log")
	}
}

// leafCases are the hostile askers, run in parallel (each waits 4 s for
// what it must not get).
func leafCases(t *testing.T, bin, sock, tcp string, all []string) {
	web, roots := all[0], all[2]
	for name, tc := range map[string]struct {
		uid              uint32 // 0: this process (root)
		target, id, cl   string
		want, refusedFor string // want: the names served; refusedFor: text of the refusal
	}{
		"web's sidecar asks for api's leaf too":       {target: sock, id: "web-sidecar-proxy", cl: "web", want: web + "," + roots},
		"web's mapped group asks for api's leaf too":  {target: sock, id: "edge-2", cl: "web-edge", want: web + "," + roots},
		"another group asks for both leaves":          {target: sock, id: "x", cl: "other", want: roots},
		"another uid in another group asks for both":  {uid: 65534, target: sock, id: "x", cl: "other", want: roots},
		"another uid claims web's sidecar":            {uid: 65534, target: sock, id: "web-sidecar-proxy", cl: "web", refusedFor: `uid 65534, gid 65534) may not act for Connect service "web"`},
		"another uid claims web's mapped group":       {uid: 65534, target: sock, id: "e", cl: "web-edge", refusedFor: `may not act for Connect service "web"`},
		"another uid claims api's sidecar (defaults)": {uid: 65534, target: sock, id: "api-sidecar-proxy", cl: "api", refusedFor: `may not act for Connect service "api"`},
		"web's sidecar over TCP":                      {target: tcp, id: "web-sidecar-proxy", cl: "web", refusedFor: "served only over the agent's Unix socket"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var ans secretsAnswer
			if tc.uid == 0 {
				ans = askSecrets(tc.target, tc.id, tc.cl, all, 4*time.Second)
			} else {
				ans = askAs(t, bin, tc.target, tc.uid, tc.uid, tc.id, tc.cl, all)
			}
			if tc.refusedFor != "" {
				if ans.Code != "PermissionDenied" || !strings.Contains(ans.Err, tc.refusedFor) || len(ans.Got) != 0 {
					t.Fatalf("got %+v, want PermissionDenied saying %q and nothing served", ans, tc.refusedFor)
				}
				return
			}
			if ans.Err != "" || strings.Join(ans.Got, ",") != tc.want {
				t.Fatalf("got %+v, want exactly %s", ans, tc.want)
			}
		})
	}

}

// restGetsNoKey: REST over the socket is no way around it, even as the
// node that holds a key (web's sidecar): the agent vets clients on gRPC
// streams only, so it answers no poll at all (it used to answer 503 only
// because its relay never sets the central's translation).
func restGetsNoKey(t *testing.T, ag *runningAgent, web, api string) {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", ag.SocketAddr().String())
	}}, Timeout: 5 * time.Second}
	for _, node := range []string{`{"id":"edge-3","cluster":"other"}`, `{"id":"web-sidecar-proxy","cluster":"web"}`} {
		resp, err := hc.Post("http://agent/v3/discovery:secrets", "application/json",
			strings.NewReader(`{"node":`+node+`,"resource_names":["`+web+`","`+api+`"]}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "PRIVATE KEY") || strings.Contains(string(body), "privateKey") {
			t.Fatalf("REST over the socket served a key to %s: %d %s", node, resp.StatusCode, body)
		}
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "not by the agent") {
			t.Errorf("REST poll as %s: %d %s, want 404 saying the agent serves no REST", node, resp.StatusCode, body)
		}
	}
}

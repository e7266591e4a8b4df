package agent_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// TestAgentRelaysConnectSidecars is the recommended mesh set-up: the
// central bridge in agent mode serves no key, and a sidecar Envoy on the
// agent's socket, known only by its proxy id as with Consul, gets its
// registration's public and upstream listeners and mesh cluster through
// the relay (the agent announces the proxy id and its Consul node), and
// its service's leaf, chaining to Consul's root, from the agent. The
// central bridge lists it as that registration's sidecar.
func TestAgentRelaysConnectSidecars(t *testing.T) {
	ca := consultest.Start(t)
	ca.RegisterWebAPIMesh(t)
	d, central := startMeshCentralDaemon(t, ca)

	agentDir := t.TempDir()
	var logs syncbuffer.Buffer
	ag := startAgentWith(t, agentDir, func(c *agent.Config) {
		c.Upstreams = []string{central}
		c.ConsulAddress = ca.HTTPAddr()
		c.ConnectServices = []string{"web"}
	}, &logs)
	node, err := ca.Client().Agent().NodeName()
	if err != nil {
		t.Fatal(err)
	}
	roots, _, err := ca.Client().Connect().CARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	group := ir.SidecarGroupName(node, "web-sidecar-proxy")
	public, upstream := ir.PublicListenerName(group), group+".upstream.api"
	mc := ir.MeshClusterName("api", "dc1", roots.TrustDomain)

	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	c, err := adsclient.Dial(wctx, adsclient.Config{Addr: "unix://" + ag.SocketAddr().String(), NodeID: "web-sidecar-proxy", Cluster: "web", Mode: adsclient.Delta})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	st, err := c.Wait(wctx, func(s adsclient.State) bool {
		return s.Listener(public) != nil && s.Listener(upstream) != nil && len(s.Endpoints(mc)) > 0 &&
			s.Secret(ir.LeafSecretPrefix+"web") != nil && s.Secret(ir.RootsSecretName) != nil
	})
	if err != nil {
		t.Fatalf("waiting for web's sidecar config through the agent: %v; have %v", err, c.Snapshot())
	}
	if got := st.Listener(upstream).GetAddress().GetSocketAddress().GetPortValue(); got != 9191 {
		t.Errorf("upstream listener port %d, want 9191", got)
	}
	consultest.VerifyConnectLeaf(t, []byte(st.Secret(ir.LeafSecretPrefix+"web").GetTlsCertificate().GetCertificateChain().GetInlineString()), roots, ir.SPIFFEID(roots.TrustDomain, "dc1", "web"))

	// api's sidecar is registered here too, but api is not among the
	// connect services: it would get no leaf, which the log says.
	if !strings.Contains(logs.String(), `"proxy_id":"api-sidecar-proxy","service":"api"`) || !strings.Contains(logs.String(), "not in connect.services") {
		t.Errorf("no warning about api's sidecar without a leaf:\n%s", logs.String())
	}

	// The registrations are saved (0600) in the form a restart reads
	// (TestAgentKeysSidecarsFromSavedRegistrations).
	var saved []byte
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if saved, err = os.ReadFile(filepath.Join(agentDir, "data", "sidecars.json")); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("registrations not saved: %v", err)
	}
	if fi, _ := os.Stat(filepath.Join(agentDir, "data", "sidecars.json")); fi.Mode().Perm() != 0o600 {
		t.Errorf("sidecars.json mode %v, want 0600", fi.Mode().Perm())
	}
	if !strings.Contains(string(saved), `"proxy_id":"web-sidecar-proxy","group":"`+group+`"`) {
		t.Errorf("saved registrations lack web's sidecar group: %s", saved)
	}

	// The central bridge sees the relayed stream as web's sidecar on this
	// Consul node (not as the agent's node id in group "web").
	resp, err := centralAdminGet(d, "/v1/proxies")
	if err != nil {
		t.Fatal(err)
	}
	var proxies []serve.ProxyStatus
	err = json.NewDecoder(resp.Body).Decode(&proxies)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(proxies, func(p serve.ProxyStatus) bool { return p.NodeID == "web-sidecar-proxy" })
	if i < 0 || proxies[i].Group != group || proxies[i].Sidecar == nil || proxies[i].Sidecar.Service != "web" {
		t.Fatalf("central /v1/proxies: %+v", proxies)
	}
	// Agent mode: the central bridge serves the sidecar no secret (the
	// leaf came from the agent), but its listeners.
	resp, err = centralAdminGet(d, "/v1/config_dump?node=web-sidecar-proxy")
	if err != nil {
		t.Fatal(err)
	}
	var dump xds.ConfigDump
	err = json.NewDecoder(resp.Body).Decode(&dump)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if dump.Group != group || len(dump.Listeners) != 2 || len(dump.Secrets) != 0 {
		t.Errorf("central config dump of the sidecar: group %q, %d listeners, %d secrets; want %q, 2, 0", dump.Group, len(dump.Listeners), len(dump.Secrets), group)
	}
}

// TestAgentKeysSidecarsFromSavedRegistrations: an agent restarting while
// its Consul agent is down keys a local sidecar by the registrations it
// saved, at once (not by the node.cluster it announces, and without
// waiting for Consul).
func TestAgentKeysSidecarsFromSavedRegistrations(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	group := ir.SidecarGroupName("vm-a", "web-sidecar-proxy")
	saved := `{"node":"vm-a","proxies":[{"proxy_id":"web-sidecar-proxy","group":"` + group + `","service":"web"}]}`
	if err := os.WriteFile(filepath.Join(data, "sidecars.json"), []byte(saved), 0o600); err != nil {
		t.Fatal(err)
	}
	ag := startAgentWith(t, dir, func(c *agent.Config) {
		c.ConsulAddress = freeAddr(t) // nothing listens: Consul is down
		c.ConnectServices = []string{"web"}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := adsclient.Dial(ctx, adsclient.Config{Addr: "unix://" + ag.SocketAddr().String(), NodeID: "web-sidecar-proxy", Cluster: "web", Mode: adsclient.Delta})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	for {
		ps := ag.Server().Proxies()
		if i := slices.IndexFunc(ps, func(p serve.ProxyStatus) bool { return p.NodeID == "web-sidecar-proxy" }); i >= 0 {
			if ps[i].Group != group && ps[i].NodeCluster != group {
				t.Fatalf("local sidecar keyed as %+v, want group %q", ps[i], group)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the local sidecar's stream never showed on /v1/proxies: %+v", ag.Server().Proxies())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// centralAdminGet GETs path from the central bridge's admin API with its
// bearer token (on by default).
func centralAdminGet(d *bridge.Daemon, path string) (*http.Response, error) {
	tok, err := os.ReadFile(d.AdminTokenFile())
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+d.AdminAddr().String()+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	return http.DefaultClient.Do(req)
}

package bridge_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// minimalPolicy is the read-only ACL policy docs/operations/acls.md documents.
const minimalPolicy = `
service_prefix "" { policy = "read" }
node_prefix ""    { policy = "read" }
key_prefix "xds-bridge/policy/" { policy = "read" }
`

// TestMinimalACLTokenWorksAndNeverLeaks runs against a default-deny Consul
// with the documented read-only policy: the bridge serves, and the token
// appears in no log line (debug level) and no admin response.
func TestMinimalACLTokenWorksAndNeverLeaks(t *testing.T) {
	agent, tok := aclAgent(t)
	root := agent.Client()
	secret := tok.SecretID
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	if _, err := root.KV().Put(&api.KVPair{Key: "xds-bridge/policy/a.hcl", Value: []byte(`service "web" { connect_timeout = "3s" }`)}, nil); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	// The bridge must not pick up the test process's own token.
	t.Setenv("CONSUL_HTTP_TOKEN", "")

	logs := &syncbuffer.Buffer{}
	s := policy.DefaultSettings()
	s.Consul.Address = agent.HTTPAddr()
	s.Consul.TokenFile = tokenFile
	s.Consul.KVPrefix = "xds-bridge/policy/"
	s.XDS.Listen, s.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	d := bridge.New(bridge.Config{
		Settings: s,
		Policy:   &policy.Policy{ExportAllServices: true},
		Logger:   zerolog.New(logs).Level(zerolog.DebugLevel),
		Query:    consul.QueryOptions{BackoffInitial: 100 * time.Millisecond, BackoffMax: time.Second},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-d.Started()
	h := &harness{agent: agent, daemon: d}
	c := dial(t, h, adsclient.SotW, nil)
	waitEndpoints(t, "web", ep(1001, "HEALTHY"), c)
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if _, err := c.Wait(wctx, func(s adsclient.State) bool {
		return s.Cluster("web").GetConnectTimeout().AsDuration() == 3*time.Second
	}); err != nil {
		t.Fatalf("KV policy not applied with the read-only token: %v", err)
	}

	trackAdmin(t, d)
	base := "http://" + d.AdminAddr().String()
	for _, path := range []string{"/v1/policy", "/v1/catalog", "/v1/proxies", "/v1/config_dump?cluster=anything", "/metrics", "/readyz"} {
		_, body := get(t, base+path)
		if strings.Contains(body, secret) {
			t.Errorf("%s shows the ACL token", path)
		}
	}
	if out := logs.String(); strings.Contains(out, secret) || !strings.Contains(out, "snapshot updated") {
		t.Errorf("logs contain the token, or no logs were captured (%d bytes)", len(out))
	}
}

// aclAgent starts Consul with default-deny ACLs and returns it with a
// token of the documented read-only policy.
func aclAgent(t *testing.T) (*consultest.Agent, *api.ACLToken) {
	t.Helper()
	agent := consultest.Start(t,
		consultest.WithHCL(`acl {
  enabled        = true
  default_policy = "deny"
  tokens {
    initial_management = "root-token-for-tests"
    agent              = "root-token-for-tests"
  }
}`),
		consultest.WithToken("root-token-for-tests"))
	root := agent.Client()
	if _, _, err := root.ACL().PolicyCreate(&api.ACLPolicy{Name: "xds-bridge-read", Rules: minimalPolicy}, nil); err != nil {
		t.Fatal(err)
	}
	tok, _, err := root.ACL().TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{Name: "xds-bridge-read"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return agent, tok
}

// TestReadinessTurnsStaleOnRevokedToken: a token revoked (or expired)
// while the bridge runs leaves Consul answering every data query with
// 403, so nothing new is served: /readyz turns 503 within stale_after,
// naming the refusal, as it does when Consul is unreachable. The
// reachability probe (GET /v1/status/leader, which needs no token) kept
// it 200 while the catalog changed unseen. consul_up stays 1: Consul is
// up; the token is not.
func TestReadinessTurnsStaleOnRevokedToken(t *testing.T) {
	agent, tok := aclAgent(t)
	root := agent.Client()
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(tok.SecretID), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONSUL_HTTP_TOKEN", "")
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.Settings.Consul.TokenFile = tokenFile
		c.Settings.Consul.StaleAfter = 2 * time.Second
	})
	c := dial(t, h, adsclient.SotW, nil)
	waitEndpoints(t, "web", ep(1001, "HEALTHY"), c)
	base := "http://" + h.daemon.AdminAddr().String()
	if code, body := get(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("readyz %d %s before the token is revoked", code, body)
	}
	if _, err := root.ACL().TokenDelete(tok.AccessorID, nil); err != nil {
		t.Fatal(err)
	}
	// A change wakes the blocking queries, which Consul now refuses.
	agent.RegisterTTL(t, "web", "web-2", 1002, nil, nil)
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := get(t, base+"/readyz")
		if code == http.StatusServiceUnavailable {
			if !strings.Contains(body, "403") && !strings.Contains(strings.ToLower(body), "acl") {
				t.Errorf("readyz 503 without naming the refusal: %s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz still %d %q 20 s after the token was revoked (stale_after 2s): the served world is frozen and nothing says so", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, m := get(t, base+"/metrics"); metricValue(m, "consul_xds_bridge_consul_up") != 1 {
		t.Errorf("consul_up %v with Consul answering (it refuses the token only)", metricValue(m, "consul_xds_bridge_consul_up"))
	}
}

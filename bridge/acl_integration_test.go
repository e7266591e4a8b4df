package bridge_test

import (
	"context"
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

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
)

// TestCentralPlaintextMeshRefusedAtStart: a central bridge whose policy
// would send every sidecar's Connect leaf key over plaintext xDS does not
// start: Run fails before the xDS port opens, naming the settings. With
// the lab switch it starts and warns; over a closed Unix socket it
// starts.
func TestCentralPlaintextMeshRefusedAtStart(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterWebAPIMesh(t)
	file := filepath.Join(t.TempDir(), "mesh.hcl")
	if err := os.WriteFile(file, []byte("mesh {\n  mode = \"central\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pol := loadPolicy(t, file)

	s := policy.DefaultSettings()
	s.Consul.Address = agent.HTTPAddr()
	s.XDS.Listen, s.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	s.Consul.StateDir = t.TempDir()
	d := bridge.New(bridge.Config{Settings: s, Policy: pol, ConfigFiles: []string{file},
		Logger: zerolog.New(zerolog.NewTestWriter(t))})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := d.Run(ctx)
	select {
	case <-d.Started():
		t.Error("the xDS and admin listeners opened")
	default:
	}
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Run = %v (ctx %v), want a refusal at start", err, ctx.Err())
	}
	for _, want := range []string{file + ":2:", "mesh mode \"central\"", "plaintext", "authorize_nodes", "insecure_serve_keys"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}

	// The lab switch: starts, and says at start what it allows.
	logs := &syncbuffer.Buffer{}
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.Policy, c.ConfigFiles = pol, []string{file}
		c.Settings.XDS.InsecureServeKeys = true
		c.Logger = zerolog.New(logs)
	})
	waitReady(t, h.daemon)
	if out := logs.String(); !strings.Contains(out, `"level":"warn"`) || !strings.Contains(out, "xds.insecure_serve_keys") || !strings.Contains(out, `"private_keys_served":1`) {
		t.Errorf("no start warning about insecure_serve_keys in the logs:\n%s", out)
	}

	// A Unix socket only its owner and group may connect to is allowed.
	sock := filepath.Join(t.TempDir(), "xds.sock")
	h = startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.Policy, c.ConfigFiles = pol, []string{file}
		c.Settings.XDS.InsecureServeKeys = false
		c.Settings.XDS.Listen = "unix://" + sock
	})
	waitReady(t, h.daemon)
}

// TestReloadThatWouldSendKeysRefused: a KV document that adds an
// upstream TLS key to a bridge serving plaintext xDS is rejected like a
// broken document, naming the setting; the last good policy keeps
// serving.
func TestReloadThatWouldSendKeysRefused(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	const prefix = "xds-bridge/policy/"
	h := startBridgeWith(t, agent, consultest.NewForwarder(t, agent.HTTPAddr()), func(c *bridge.Config) {
		c.Settings.XDS.InsecureServeKeys = false
		c.Settings.Consul.KVPrefix = prefix
		c.Query = consul.QueryOptions{BackoffInitial: 100 * time.Millisecond, BackoffMax: time.Second}
	})
	if _, err := agent.Client().KV().Put(&api.KVPair{Key: prefix + "base.hcl", Value: []byte("export_all_services = true\n")}, nil); err != nil {
		t.Fatal(err)
	}
	waitReady(t, h.daemon)
	doc := "service \"web\" {\n  tls {\n    cert_file = \"/etc/b/c.pem\"\n    key_file  = \"/etc/b/k.pem\"\n  }\n}\n"
	if _, err := agent.Client().KV().Put(&api.KVPair{Key: prefix + "keys.hcl", Value: []byte(doc)}, nil); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if e := h.daemon.Policy().LastError; e != nil {
			all := strings.Join(e.Diagnostics, "\n")
			if !strings.Contains(all, "Private key would be served without client authentication") || !strings.Contains(all, "authorize_nodes") {
				t.Fatalf("the reload was rejected, but not for the keys' transport:\n%s", all)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the KV document adding a key was not rejected within 15s")
		}
	}
}

package consultest

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

func get(addr, path string, timeout time.Duration) (string, error) {
	// A fresh transport per call keeps pooled connections out of the picture.
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", errors.New(resp.Status + ": " + string(body))
	}
	return string(body), nil
}

func TestTwoAgents(t *testing.T) {
	t.Parallel()
	a, b := Start(t), Start(t)
	if a.HTTPAddr() == b.HTTPAddr() {
		t.Fatalf("both agents on %s", a.HTTPAddr())
	}
	if a.NodeName() == b.NodeName() {
		t.Fatalf("both agents named %s", a.NodeName())
	}
	for _, ag := range []*Agent{a, b} {
		leader, err := ag.Client().Status().Leader()
		if err != nil || leader == "" {
			t.Errorf("agent %s: leader %q, err %v", ag.HTTPAddr(), leader, err)
		}
		self, err := ag.Client().Agent().Self()
		if dc := self["Config"]["Datacenter"]; err != nil || dc != ag.Datacenter() {
			t.Errorf("agent %s: datacenter %v, err %v; want %q", ag.HTTPAddr(), dc, err, ag.Datacenter())
		}
	}
}

func TestForwarder(t *testing.T) {
	t.Parallel()
	a := Start(t)
	f := NewForwarder(t, a.HTTPAddr())
	addr := f.Addr()

	if body, err := get(addr, "/v1/status/leader", 5*time.Second); err != nil || !strings.Contains(body, "127.0.0.1") {
		t.Fatalf("through forwarder: %q, %v", body, err)
	}

	// A blocking query holds its connection open; Stop must break it at once.
	blocked := make(chan error, 1)
	go func() {
		_, err := get(addr, "/v1/catalog/services?index=1000000&wait=60s", time.Minute)
		blocked <- err
	}()
	time.Sleep(300 * time.Millisecond)

	f.Stop()
	select {
	case err := <-blocked:
		if err == nil {
			t.Fatal("blocking query through stopped forwarder succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("blocking query not broken by Stop")
	}
	if _, err := get(addr, "/v1/status/leader", 2*time.Second); err == nil {
		t.Fatal("request through stopped forwarder succeeded")
	}

	f.Start()
	if f.Addr() != addr {
		t.Fatalf("address changed from %s to %s", addr, f.Addr())
	}
	if _, err := get(addr, "/v1/status/leader", 5*time.Second); err != nil {
		t.Fatalf("after Start: %v", err)
	}
}

func TestFreezeThaw(t *testing.T) {
	t.Parallel()
	a := Start(t)
	a.Freeze()
	_, err := get(a.HTTPAddr(), "/v1/status/leader", time.Second)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		a.Thaw()
		t.Fatalf("frozen agent: got %v, want a timeout", err)
	}
	a.Thaw()
	if _, err := get(a.HTTPAddr(), "/v1/status/leader", 5*time.Second); err != nil {
		t.Fatalf("thawed agent: %v", err)
	}
}

func TestRegisterTTL(t *testing.T) {
	t.Parallel()
	a := Start(t)
	a.RegisterTTL(t, "web", "web-1", 8080, []string{"v1"}, map[string]string{"zone": "a"})

	status := func() string {
		t.Helper()
		entries, _, err := a.Client().Health().Service("web", "", false, nil)
		if err != nil {
			t.Fatalf("health: %v", err)
		}
		if len(entries) != 1 {
			t.Fatalf("got %d instances of web, want 1", len(entries))
		}
		e := entries[0]
		if e.Service.ID != "web-1" || e.Service.Port != 8080 || e.Service.Address != "127.0.0.1" || e.Service.Meta["zone"] != "a" {
			t.Fatalf("unexpected instance %+v", e.Service)
		}
		for _, c := range e.Checks {
			if c.CheckID == "service:web-1" {
				return c.Status
			}
		}
		t.Fatalf("no check service:web-1 in %+v", e.Checks)
		return ""
	}
	if s := status(); s != api.HealthPassing {
		t.Fatalf("after register: %s, want passing", s)
	}
	a.SetTTL(t, "service:web-1", api.HealthCritical)
	if s := status(); s != api.HealthCritical {
		t.Fatalf("after SetTTL: %s, want critical", s)
	}

	a.Deregister(t, "web-1")
	entries, _, err := a.Client().Health().Service("web", "", false, nil)
	if err != nil || len(entries) != 0 {
		t.Fatalf("after deregister: %d instances, err %v", len(entries), err)
	}
}

func TestRestartKeepsData(t *testing.T) {
	t.Parallel()
	a := Start(t, WithDataDir(""))
	addr := a.HTTPAddr()
	if _, err := a.Client().KV().Put(&api.KVPair{Key: "k", Value: []byte("v")}, nil); err != nil {
		t.Fatalf("put: %v", err)
	}
	a.Kill()
	if _, err := get(addr, "/v1/status/leader", time.Second); err == nil {
		t.Fatal("killed agent still answers")
	}
	a.Restart(t)
	if a.HTTPAddr() != addr {
		t.Fatalf("address changed from %s to %s", addr, a.HTTPAddr())
	}
	kv, _, err := a.Client().KV().Get("k", nil)
	if err != nil || kv == nil || string(kv.Value) != "v" {
		t.Fatalf("after restart: %+v, %v", kv, err)
	}
}

func TestACL(t *testing.T) {
	t.Parallel()
	a := Start(t,
		WithHCL(`acl {
  enabled        = true
  default_policy = "deny"
  tokens {
    initial_management = "root"
    agent              = "root"
  }
}`),
		WithToken("root"))
	if _, err := a.Client().KV().Put(&api.KVPair{Key: "k", Value: []byte("v")}, nil); err != nil {
		t.Fatalf("put with token: %v", err)
	}
	if _, err := get(a.HTTPAddr(), "/v1/kv/k", 5*time.Second); err == nil {
		t.Fatal("anonymous read allowed under default-deny ACLs")
	}
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent/redirect"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

// TestRedirectTrafficCommand runs the subcommand as an operator would
// (Consul's flags, -netns), in a namespace the test creates: the rules
// are installed, installing again changes nothing, -remove leaves none.
func TestRedirectTrafficCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root for network namespaces and iptables (CI=true)")
		}
		t.Skip("needs root for network namespaces and iptables")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("iptables is not installed (make test runs scripts/install-iptables.sh)")
		}
		t.Skip("iptables is not installed; run scripts/install-iptables.sh")
	}
	name := fmt.Sprintf("xdsb-cmd-%d", os.Getpid())
	_ = exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ip netns add: %v: %s (CI=true)", err, out)
		}
		t.Skipf("cannot create a network namespace (root without CAP_SYS_ADMIN?): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	path := "/var/run/netns/" + name
	run := redirect.InNetns(path, redirect.Exec(""))
	ours := func() []string {
		l, err := redirect.List(context.Background(), run)
		if err != nil {
			t.Fatal(err)
		}
		return redirect.Ours(l)
	}
	args := []string{"agent", "redirect-traffic", "-proxy-uid", "5678", "-proxy-inbound-port", "21000",
		"-exclude-outbound-port", "8500", "-exclude-outbound-port", "8300:8302", "-exclude-uid", "0", "-netns", path}
	for i := range 2 {
		var out, errb bytes.Buffer
		if code := realMain(args, &out, &errb); code != 0 {
			t.Fatalf("run %d: exit %d: %s", i, code, errb.String())
		}
	}
	got := strings.Join(ours(), "\n")
	for _, w := range []string{
		"-A OUTPUT -p tcp -j CONSUL_PROXY_OUTPUT",
		"-A CONSUL_PROXY_OUTPUT -p tcp -m tcp --dport 8300:8302 -j RETURN",
		"-A CONSUL_PROXY_OUTPUT -m owner --uid-owner 0 -j RETURN",
		"-A CONSUL_PROXY_REDIRECT -p tcp -j REDIRECT --to-ports 15001",
		"-A CONSUL_PROXY_IN_REDIRECT -p tcp -j REDIRECT --to-ports 21000",
	} {
		if strings.Count(got, w) != 1 {
			t.Errorf("want %q once after two runs, in:\n%s", w, got)
		}
	}
	var out, errb bytes.Buffer
	if code := realMain([]string{"agent", "redirect-traffic", "-remove", "-netns", path}, &out, &errb); code != 0 {
		t.Fatalf("-remove: exit %d: %s", code, errb.String())
	}
	if o := ours(); len(o) > 0 {
		t.Errorf("left after -remove: %q", o)
	}

	// Flag mistakes name the flag and exit 2.
	errb.Reset()
	if code := realMain([]string{"agent", "redirect-traffic", "-proxy-uid", "envoy", "-proxy-inbound-port", "21000", "-netns", path}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `-proxy-uid "envoy"`) {
		t.Errorf("exit %d, %q; want 2 naming -proxy-uid", code, errb.String())
	}

	// -proxy-id: the ports come from the registration in the local
	// Consul agent (the sidecar's port, its outbound_listener_port).
	agent := consultest.Start(t)
	if err := agent.Client().Agent().ServiceRegister(&api.AgentServiceRegistration{Name: "web", Port: 8080, Connect: &api.AgentServiceConnect{
		SidecarService: &api.AgentServiceRegistration{Port: 21042, Proxy: &api.AgentServiceConnectProxyConfig{
			Mode: api.ProxyModeTransparent, TransparentProxy: &api.TransparentProxyConfig{OutboundListenerPort: 15002}}}}}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CONSUL_HTTP_ADDR", agent.HTTPAddr())
	errb.Reset()
	if code := realMain([]string{"agent", "redirect-traffic", "-proxy-uid", "5678", "-proxy-id", "web-sidecar-proxy", "-netns", path}, &out, &errb); code != 0 {
		t.Fatalf("-proxy-id: exit %d: %s", code, errb.String())
	}
	got = strings.Join(ours(), "\n")
	for _, w := range []string{
		"-A CONSUL_PROXY_REDIRECT -p tcp -j REDIRECT --to-ports 15002",
		"-A CONSUL_PROXY_IN_REDIRECT -p tcp -j REDIRECT --to-ports 21042",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("-proxy-id: want %q in:\n%s", w, got)
		}
	}
	errb.Reset()
	if code := realMain([]string{"agent", "redirect-traffic", "-proxy-uid", "5678", "-proxy-id", "web", "-netns", path}, &out, &errb); code != 1 || !strings.Contains(errb.String(), `"web" is not a connect-proxy`) {
		t.Errorf("-proxy-id of a non-proxy: exit %d, %q", code, errb.String())
	}
	_ = realMain([]string{"agent", "redirect-traffic", "-remove", "-netns", path}, &out, &errb)

}

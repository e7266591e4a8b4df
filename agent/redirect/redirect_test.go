package redirect

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/consul/api"
)

// TestRulesConsulOrder pins the rules to Consul 1.15's sdk/iptables
// Setup for the same settings (its command's flags): chain creation,
// the outbound redirect, DNS, the OUTPUT jump, the proxy uid and
// loopback returns, then the exclusions inserted at the chain's head,
// then inbound.
func TestRulesConsulOrder(t *testing.T) {
	got := Rules(Config{
		ProxyUID: "1234", InboundPort: 20000, OutboundPort: 0,
		ExcludeInboundPorts: []string{"22"}, ExcludeOutboundPorts: []string{"8500"},
		ExcludeOutboundCIDRs: []string{"10.0.0.0/8"}, ExcludeUIDs: []string{"0"},
		ConsulDNSIP: "127.0.0.1", ConsulDNSPort: 8600,
	})
	want := []string{
		"-N CONSUL_PROXY_INBOUND",
		"-N CONSUL_PROXY_IN_REDIRECT",
		"-N CONSUL_PROXY_OUTPUT",
		"-N CONSUL_PROXY_REDIRECT",
		"-N CONSUL_DNS_REDIRECT",
		"-A CONSUL_PROXY_REDIRECT -p tcp -j REDIRECT --to-port 15001",
		"-A CONSUL_DNS_REDIRECT -p udp -d 127.0.0.1 --dport 53 -j DNAT --to-destination 127.0.0.1:8600",
		"-A CONSUL_DNS_REDIRECT -p tcp -d 127.0.0.1 --dport 53 -j DNAT --to-destination 127.0.0.1:8600",
		"-A OUTPUT -p udp -d 127.0.0.1 --dport 53 -j CONSUL_DNS_REDIRECT",
		"-A OUTPUT -p tcp -d 127.0.0.1 --dport 53 -j CONSUL_DNS_REDIRECT",
		"-A OUTPUT -p tcp -j CONSUL_PROXY_OUTPUT",
		"-A CONSUL_PROXY_OUTPUT -m owner --uid-owner 1234 -j RETURN",
		"-A CONSUL_PROXY_OUTPUT -d 127.0.0.1/32 -j RETURN",
		"-A CONSUL_PROXY_OUTPUT -j CONSUL_PROXY_REDIRECT",
		"-I CONSUL_PROXY_OUTPUT -p tcp --dport 8500 -j RETURN",
		"-I CONSUL_PROXY_OUTPUT -d 10.0.0.0/8 -j RETURN",
		"-I CONSUL_PROXY_OUTPUT -m owner --uid-owner 0 -j RETURN",
		"-A CONSUL_PROXY_IN_REDIRECT -p tcp -j REDIRECT --to-port 20000",
		"-A PREROUTING -p tcp -j CONSUL_PROXY_INBOUND",
		"-A CONSUL_PROXY_INBOUND -p tcp -j CONSUL_PROXY_IN_REDIRECT",
		"-I CONSUL_PROXY_INBOUND -p tcp --dport 22 -j RETURN",
	}
	var lines []string
	for _, r := range got {
		if r[0] != "-t" || r[1] != "nat" {
			t.Fatalf("rule %q is not in the nat table", r)
		}
		lines = append(lines, strings.Join(r[2:], " "))
	}
	if d := cmp.Diff(want, lines); d != "" {
		t.Errorf("rules (-want +got):\n%s", d)
	}
}

// TestRulesDNSIPOnly: a DNS IP without a port DNATs every port-53 query
// to it (Consul's first DNS form).
func TestRulesDNSIPOnly(t *testing.T) {
	var lines []string
	for _, r := range Rules(Config{ProxyUID: "1", InboundPort: 1, ConsulDNSIP: "10.0.0.2"}) {
		lines = append(lines, strings.Join(r[2:], " "))
	}
	for _, w := range []string{
		"-A CONSUL_DNS_REDIRECT -p udp --dport 53 -j DNAT --to-destination 10.0.0.2",
		"-A OUTPUT -p tcp --dport 53 -j CONSUL_DNS_REDIRECT",
	} {
		if !slices.Contains(lines, w) {
			t.Errorf("missing %q in %q", w, lines)
		}
	}
}

func TestValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		c    Config
		want []string // substrings of the error; none: valid
	}{
		"ok":            {c: Config{ProxyUID: "101", InboundPort: 21000, ExcludeOutboundPorts: []string{"8500", "8300:8302", "ssh"}, ExcludeOutboundCIDRs: []string{"10.0.0.0/8", "192.168.1.1"}}},
		"no uid":        {c: Config{InboundPort: 21000}, want: []string{"-proxy-uid is required"}},
		"name uid":      {c: Config{ProxyUID: "envoy", InboundPort: 21000}, want: []string{`-proxy-uid "envoy"`}},
		"no inbound":    {c: Config{ProxyUID: "1"}, want: []string{"-proxy-inbound-port 0"}},
		"bad outbound":  {c: Config{ProxyUID: "1", InboundPort: 1, OutboundPort: 70000}, want: []string{"-proxy-outbound-port 70000"}},
		"bad port spec": {c: Config{ProxyUID: "1", InboundPort: 1, ExcludeInboundPorts: []string{"9:8"}, ExcludeOutboundPorts: []string{"-j ACCEPT"}}, want: []string{`-exclude-inbound-port "9:8"`, `-exclude-outbound-port "-j ACCEPT"`}},
		"bad cidr":      {c: Config{ProxyUID: "1", InboundPort: 1, ExcludeOutboundCIDRs: []string{"10.0.0.0/99"}}, want: []string{`-exclude-outbound-cidr "10.0.0.0/99"`}},
		"bad uid":       {c: Config{ProxyUID: "1", InboundPort: 1, ExcludeUIDs: []string{"-1"}}, want: []string{`-exclude-uid "-1"`}},
		"bad dns":       {c: Config{ProxyUID: "1", InboundPort: 1, ConsulDNSIP: "consul"}, want: []string{`-consul-dns-ip "consul"`}},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.c.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("err = %v, want ErrConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// fakeTables is iptables' nat table, enough for Install and Remove: it
// fails a -N of an existing chain as iptables does, so a second Install
// that did not remove first would fail.
type fakeTables struct {
	chains map[string][]string
	failOn string
}

func newFake() *fakeTables {
	return &fakeTables{chains: map[string][]string{"PREROUTING": nil, "INPUT": nil, "OUTPUT": nil, "POSTROUTING": nil}}
}

func (f *fakeTables) run(_ context.Context, args ...string) ([]byte, error) {
	line := strings.Join(args, " ")
	if f.failOn != "" && strings.Contains(line, f.failOn) {
		return []byte("iptables: fake failure"), errors.New("exit status 1")
	}
	if len(args) < 3 || args[0] != "-t" || args[1] != "nat" {
		return nil, errors.New("fake: want -t nat")
	}
	op, rest := args[2], args[3:]
	switch op {
	case "-S":
		var out strings.Builder
		for _, c := range []string{"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"} {
			out.WriteString("-P " + c + " ACCEPT\n")
		}
		for _, c := range Chains {
			if _, ok := f.chains[c]; ok {
				out.WriteString("-N " + c + "\n")
			}
		}
		for _, c := range slices.Concat([]string{"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"}, Chains) {
			for _, r := range f.chains[c] {
				out.WriteString("-A " + c + " " + r + "\n")
			}
		}
		return []byte(out.String()), nil
	case "-N":
		if _, ok := f.chains[rest[0]]; ok {
			return []byte("iptables: Chain already exists."), errors.New("exit status 1")
		}
		f.chains[rest[0]] = nil
	case "-A", "-I", "-D":
		rs, ok := f.chains[rest[0]]
		if !ok {
			return []byte("iptables: No chain/target/match by that name."), errors.New("exit status 1")
		}
		r := strings.Join(rest[1:], " ")
		switch op {
		case "-A":
			f.chains[rest[0]] = append(rs, r)
		case "-I":
			f.chains[rest[0]] = append([]string{r}, rs...)
		default:
			i := slices.Index(rs, r)
			if i < 0 {
				return []byte("iptables: Bad rule."), errors.New("exit status 1")
			}
			f.chains[rest[0]] = slices.Delete(rs, i, i+1)
		}
	case "-F":
		f.chains[rest[0]] = nil
	case "-X":
		if len(f.chains[rest[0]]) > 0 {
			return []byte("iptables: Directory not empty."), errors.New("exit status 1")
		}
		delete(f.chains, rest[0])
	}
	return nil, nil
}

// TestInstallIdempotentAndRemove: installing twice leaves one set of
// rules; Remove leaves none; a failing rule leaves none either and the
// error names it.
func TestInstallIdempotentAndRemove(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	f.chains["OUTPUT"] = []string{"-d 10.9.9.9/32 -j ACCEPT"} // someone else's rule
	c := Config{ProxyUID: "1234", InboundPort: 20000, ConsulDNSIP: "127.0.0.1", ExcludeUIDs: []string{"0"}}
	if err := Install(ctx, f.run, c); err != nil {
		t.Fatal(err)
	}
	once, _ := List(ctx, f.run)
	if err := Install(ctx, f.run, c); err != nil {
		t.Fatalf("second install: %v", err)
	}
	twice, _ := List(ctx, f.run)
	if d := cmp.Diff(once, twice); d != "" {
		t.Errorf("a second install changed the table (-once +twice):\n%s", d)
	}
	if n := len(Ours(once)); n != len(Rules(c)) {
		t.Errorf("%d of our lines in the table, want %d (one per rule):\n%s", n, len(Rules(c)), strings.Join(once, "\n"))
	}
	if err := Remove(ctx, f.run); err != nil {
		t.Fatal(err)
	}
	after, _ := List(ctx, f.run)
	if o := Ours(after); len(o) > 0 {
		t.Errorf("left after Remove: %q", o)
	}
	if !slices.Contains(after, "-A OUTPUT -d 10.9.9.9/32 -j ACCEPT") {
		t.Errorf("Remove took someone else's rule away: %q", after)
	}

	f.failOn = "--to-port 20000"
	err := Install(ctx, f.run, c)
	if !errors.Is(err, ErrIptables) || !strings.Contains(err.Error(), "--to-port 20000") {
		t.Fatalf("err = %v, want one naming the failing rule", err)
	}
	f.failOn = ""
	left, _ := List(ctx, f.run)
	if o := Ours(left); len(o) > 0 {
		t.Errorf("a failed install left %q", o)
	}
}

func TestFromRegistration(t *testing.T) {
	svc := &api.AgentService{ID: "web-sidecar-proxy", Kind: api.ServiceKindConnectProxy, Port: 21000, Proxy: &api.AgentServiceConnectProxyConfig{
		Config:           map[string]any{"bind_port": float64(21001), "envoy_prometheus_bind_addr": "0.0.0.0:9102"},
		TransparentProxy: &api.TransparentProxyConfig{OutboundListenerPort: 15002},
		Expose:           api.ExposeConfig{Paths: []api.ExposePath{{ListenerPort: 21500, Path: "/health"}}},
	}}
	got, err := FromRegistration(Config{ProxyUID: "1", ExcludeInboundPorts: []string{"22"}}, svc)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{ProxyUID: "1", InboundPort: 21001, OutboundPort: 15002, ExcludeInboundPorts: []string{"22", "9102", "21500"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if _, err := FromRegistration(Config{}, &api.AgentService{ID: "web"}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `"web" is not a connect-proxy`) {
		t.Errorf("err = %v", err)
	}
}

// Package redirect installs and removes the iptables rules of a transparent
// proxy on a VM, as `consul connect redirect-traffic` does: outbound TCP of
// every user but the proxy's goes to the proxy's outbound listener, inbound
// TCP to its inbound (public) listener.
//
// The rules and their order are Consul 1.15's (sdk/iptables): the nat
// chains CONSUL_PROXY_INBOUND, CONSUL_PROXY_IN_REDIRECT,
// CONSUL_PROXY_OUTPUT, CONSUL_PROXY_REDIRECT and CONSUL_DNS_REDIRECT,
// jumped to from OUTPUT and PREROUTING, with the exclusions inserted at
// the head of their chain. Unlike Consul's command, installing twice is
// harmless (the chains are emptied and their jumps removed first) and
// Remove takes everything away again.
//
// Rules is pure; Install and Remove run the iptables binary through a
// Runner, so they work in another network namespace too.
package redirect

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// The chains the rules live in: Consul's names, so the rules of either
// tool are recognised (and removed) by the other's operators.
const (
	// InboundChain intercepts inbound TCP (jumped to from PREROUTING).
	InboundChain = "CONSUL_PROXY_INBOUND"
	// InboundRedirectChain redirects inbound TCP to the proxy.
	InboundRedirectChain = "CONSUL_PROXY_IN_REDIRECT"
	// OutputChain intercepts outbound TCP (jumped to from OUTPUT).
	OutputChain = "CONSUL_PROXY_OUTPUT"
	// OutputRedirectChain redirects outbound TCP to the proxy.
	OutputRedirectChain = "CONSUL_PROXY_REDIRECT"
	// DNSChain sends DNS to Consul's DNS server.
	DNSChain = "CONSUL_DNS_REDIRECT"

	// DefaultOutboundPort is the transparent proxy's outbound listener
	// port when the registration names none (Consul's default).
	DefaultOutboundPort = 15001
)

// Chains are the chains the rules create, in Consul's order.
var Chains = []string{InboundChain, InboundRedirectChain, OutputChain, OutputRedirectChain, DNSChain}

// Config says what to redirect; the fields are the command's flags.
type Config struct {
	// ProxyUID is the proxy's user id: its own traffic is never
	// redirected (it would loop back into itself). Required.
	ProxyUID string
	// InboundPort is the proxy's inbound listener (the sidecar's public
	// listener port). Required.
	InboundPort int
	// OutboundPort is the proxy's outbound listener; 0 means 15001.
	OutboundPort int
	// ExcludeInboundPorts and ExcludeOutboundPorts are destination ports
	// left alone: a number, a range ("8080:9000") or a service name.
	ExcludeInboundPorts  []string
	ExcludeOutboundPorts []string
	// ExcludeOutboundCIDRs are destinations left alone.
	ExcludeOutboundCIDRs []string
	// ExcludeUIDs are further users whose traffic is left alone.
	ExcludeUIDs []string
	// ConsulDNSIP and ConsulDNSPort, when set, send DNS (port 53) to
	// Consul's DNS server, as Consul's command does.
	ConsulDNSIP   string
	ConsulDNSPort int
}

// ErrConfig marks an invalid Config.
var ErrConfig = errors.New("invalid redirect-traffic settings")

// Validate checks c as the command's flags; every problem names its flag.
func (c Config) Validate() error {
	var errs []error
	bad := func(flag, v, what string) {
		errs = append(errs, fmt.Errorf("-%s %q: %s: %w", flag, v, what, ErrConfig))
	}
	if c.ProxyUID == "" {
		errs = append(errs, fmt.Errorf("-proxy-uid is required (the proxy's user id, whose traffic is not redirected): %w", ErrConfig))
	} else if !isUID(c.ProxyUID) {
		bad("proxy-uid", c.ProxyUID, "want a numeric user id")
	}
	if c.InboundPort <= 0 || c.InboundPort > 65535 {
		errs = append(errs, fmt.Errorf("-proxy-inbound-port %d: want the proxy's inbound (public listener) port, 1-65535: %w", c.InboundPort, ErrConfig))
	}
	if c.OutboundPort < 0 || c.OutboundPort > 65535 {
		errs = append(errs, fmt.Errorf("-proxy-outbound-port %d: want 1-65535 (0 means %d): %w", c.OutboundPort, DefaultOutboundPort, ErrConfig))
	}
	for _, p := range c.ExcludeInboundPorts {
		if !isPortSpec(p) {
			bad("exclude-inbound-port", p, "want a port, a range (8080:9000) or a service name")
		}
	}
	for _, p := range c.ExcludeOutboundPorts {
		if !isPortSpec(p) {
			bad("exclude-outbound-port", p, "want a port, a range (8080:9000) or a service name")
		}
	}
	for _, s := range c.ExcludeOutboundCIDRs {
		if _, err := netip.ParsePrefix(s); err != nil {
			if _, err := netip.ParseAddr(s); err != nil {
				bad("exclude-outbound-cidr", s, "want an address or CIDR (10.0.0.0/8)")
			}
		}
	}
	for _, u := range c.ExcludeUIDs {
		if !isUID(u) {
			bad("exclude-uid", u, "want a numeric user id")
		}
	}
	if c.ConsulDNSIP != "" {
		if _, err := netip.ParseAddr(c.ConsulDNSIP); err != nil {
			bad("consul-dns-ip", c.ConsulDNSIP, "want an IP address")
		}
	}
	if c.ConsulDNSPort < 0 || c.ConsulDNSPort > 65535 {
		bad("consul-dns-port", strconv.Itoa(c.ConsulDNSPort), "want 1-65535")
	}
	return errors.Join(errs...)
}

func isUID(s string) bool {
	_, err := strconv.ParseUint(s, 10, 32)
	return err == nil
}

// isPortSpec accepts what iptables' --dport does: a port, a range, or a
// service name (letters, digits, '-', '_').
func isPortSpec(s string) bool {
	if lo, hi, ok := strings.Cut(s, ":"); ok {
		a, err1 := strconv.ParseUint(lo, 10, 16)
		b, err2 := strconv.ParseUint(hi, 10, 16)
		return err1 == nil && err2 == nil && a <= b
	}
	if n, err := strconv.ParseUint(s, 10, 16); err == nil {
		return n > 0
	}
	if s == "" || strings.HasPrefix(s, "-") {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// Rules are the iptables commands (arguments after "iptables") that set
// the redirection up, in Consul 1.15's order: the chains, then the
// outbound rules (DNS first, so port 53 is not sent to the proxy), the
// exclusions inserted ahead of them, then the inbound rules. c must be
// valid.
func Rules(c Config) [][]string {
	out := c.OutboundPort
	if out == 0 {
		out = DefaultOutboundPort
	}
	var rules [][]string
	add := func(args ...string) { rules = append(rules, append([]string{"-t", "nat"}, args...)) }
	for _, ch := range Chains {
		add("-N", ch)
	}
	add("-A", OutputRedirectChain, "-p", "tcp", "-j", "REDIRECT", "--to-port", strconv.Itoa(out))
	switch {
	case c.ConsulDNSIP != "" && c.ConsulDNSPort == 0:
		add("-A", DNSChain, "-p", "udp", "--dport", "53", "-j", "DNAT", "--to-destination", c.ConsulDNSIP)
		add("-A", DNSChain, "-p", "tcp", "--dport", "53", "-j", "DNAT", "--to-destination", c.ConsulDNSIP)
		add("-A", "OUTPUT", "-p", "udp", "--dport", "53", "-j", DNSChain)
		add("-A", "OUTPUT", "-p", "tcp", "--dport", "53", "-j", DNSChain)
	case c.ConsulDNSPort != 0:
		ip := c.ConsulDNSIP
		if ip == "" {
			ip = "127.0.0.1"
		}
		to := netip.AddrPortFrom(netip.MustParseAddr(ip), uint16(c.ConsulDNSPort)).String()
		add("-A", DNSChain, "-p", "udp", "-d", ip, "--dport", "53", "-j", "DNAT", "--to-destination", to)
		add("-A", DNSChain, "-p", "tcp", "-d", ip, "--dport", "53", "-j", "DNAT", "--to-destination", to)
		add("-A", "OUTPUT", "-p", "udp", "-d", ip, "--dport", "53", "-j", DNSChain)
		add("-A", "OUTPUT", "-p", "tcp", "-d", ip, "--dport", "53", "-j", DNSChain)
	}
	add("-A", "OUTPUT", "-p", "tcp", "-j", OutputChain)
	// The proxy's own connections go where they were headed.
	add("-A", OutputChain, "-m", "owner", "--uid-owner", c.ProxyUID, "-j", "RETURN")
	add("-A", OutputChain, "-d", "127.0.0.1/32", "-j", "RETURN")
	add("-A", OutputChain, "-j", OutputRedirectChain)
	// Exclusions are inserted (-I), so they come before everything above.
	for _, p := range c.ExcludeOutboundPorts {
		add("-I", OutputChain, "-p", "tcp", "--dport", p, "-j", "RETURN")
	}
	for _, d := range c.ExcludeOutboundCIDRs {
		add("-I", OutputChain, "-d", d, "-j", "RETURN")
	}
	for _, u := range c.ExcludeUIDs {
		add("-I", OutputChain, "-m", "owner", "--uid-owner", u, "-j", "RETURN")
	}
	add("-A", InboundRedirectChain, "-p", "tcp", "-j", "REDIRECT", "--to-port", strconv.Itoa(c.InboundPort))
	add("-A", "PREROUTING", "-p", "tcp", "-j", InboundChain)
	add("-A", InboundChain, "-p", "tcp", "-j", InboundRedirectChain)
	for _, p := range c.ExcludeInboundPorts {
		add("-I", InboundChain, "-p", "tcp", "--dport", p, "-j", "RETURN")
	}
	return rules
}

package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent/redirect"
)

// stringsFlag is a flag that may be given several times.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

// redirectTrafficCmd is `agent redirect-traffic`: Consul's
// `consul connect redirect-traffic` (the same flags and iptables rules),
// plus -remove.
func redirectTrafficCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("agent redirect-traffic", stderr)
	var c redirect.Config
	var inEx, outEx, cidrEx, uidEx stringsFlag
	fs.StringVar(&c.ProxyUID, "proxy-uid", "", "the proxy's user id, whose traffic is not redirected (required)")
	proxyID := fs.String("proxy-id", "", "the sidecar's Consul service id: read its ports from the local Consul agent ($CONSUL_HTTP_ADDR)")
	fs.IntVar(&c.InboundPort, "proxy-inbound-port", 0, "the proxy's inbound (public listener) port")
	fs.IntVar(&c.OutboundPort, "proxy-outbound-port", redirect.DefaultOutboundPort, "the proxy's outbound listener port")
	fs.Var(&inEx, "exclude-inbound-port", "inbound port (or range 8080:9000, or service name) not redirected; repeatable")
	fs.Var(&outEx, "exclude-outbound-port", "outbound port (or range, or service name) not redirected; repeatable")
	fs.Var(&cidrEx, "exclude-outbound-cidr", "outbound destination CIDR not redirected; repeatable")
	fs.Var(&uidEx, "exclude-uid", "further user id whose traffic is not redirected; repeatable")
	fs.StringVar(&c.ConsulDNSIP, "consul-dns-ip", "", "send DNS queries (port 53) to Consul DNS at this IP")
	fs.IntVar(&c.ConsulDNSPort, "consul-dns-port", 0, "send DNS queries (port 53) to Consul DNS on this port (of -consul-dns-ip, default 127.0.0.1)")
	netns := fs.String("netns", "", "apply the rules in this network namespace (a path, e.g. /var/run/netns/NAME)")
	remove := fs.Bool("remove", false, "remove the rules (and chains) instead of installing them")
	iptablesBin := fs.String("iptables", "", "the iptables binary (default: iptables on $PATH)")
	if rest, code, ok := parseCommand(fs, args, stdout, stderr); !ok {
		return code
	} else if len(rest) > 0 {
		fmt.Fprintf(stderr, "agent redirect-traffic: unexpected arguments %q\n", rest)
		return 2
	}
	c.ExcludeInboundPorts, c.ExcludeOutboundPorts, c.ExcludeOutboundCIDRs, c.ExcludeUIDs = inEx, outEx, cidrEx, uidEx

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	run := redirect.Exec(*iptablesBin)
	if *netns != "" {
		run = redirect.InNetns(*netns, run)
	}
	if *remove {
		if err := redirect.Remove(ctx, run); err != nil {
			fmt.Fprintf(stderr, "agent redirect-traffic -remove: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, "removed the traffic redirection rules")
		return 0
	}
	if *proxyID != "" {
		if c.InboundPort != 0 || c.OutboundPort != redirect.DefaultOutboundPort {
			fmt.Fprintln(stderr, "agent redirect-traffic: -proxy-inbound-port and -proxy-outbound-port cannot be given with -proxy-id, which reads them from the registration")
			return 2
		}
		client, err := api.NewClient(api.DefaultConfig())
		if err == nil {
			var svc *api.AgentService
			svc, _, err = client.Agent().Service(*proxyID, nil)
			if err == nil {
				c, err = redirect.FromRegistration(c, svc)
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "agent redirect-traffic: reading proxy %q from the local Consul agent: %v\n", *proxyID, err)
			return 1
		}
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintf(stderr, "agent redirect-traffic: %v\n", err)
		return 2
	}
	if err := redirect.Install(ctx, run, c); err != nil {
		fmt.Fprintf(stderr, "agent redirect-traffic: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "redirected outbound TCP to port %d and inbound TCP to port %d (except uid %s); undo with -remove\n",
		cmp.Or(c.OutboundPort, redirect.DefaultOutboundPort), c.InboundPort, c.ProxyUID)
	return 0
}

package redirect

import (
	"fmt"
	"net"
	"strconv"

	"github.com/hashicorp/consul/api"
)

// FromRegistration fills c's ports from a connect-proxy's registration,
// as Consul's -proxy-id does: the inbound port is the proxy's port (or
// its config's bind_port), the outbound port its transparent_proxy
// outbound_listener_port (default 15001), and the ports of
// envoy_prometheus_bind_addr, envoy_stats_bind_addr and exposed paths
// are excluded from inbound redirection.
func FromRegistration(c Config, svc *api.AgentService) (Config, error) {
	if svc == nil || svc.Kind != api.ServiceKindConnectProxy || svc.Proxy == nil {
		id := ""
		if svc != nil {
			id = svc.ID
		}
		return c, fmt.Errorf("service %q is not a connect-proxy registration; give -proxy-id a sidecar's service id: %w", id, ErrConfig)
	}
	c.InboundPort = svc.Port
	if p, ok := intConfig(svc.Proxy.Config["bind_port"]); ok && p != 0 {
		c.InboundPort = p
	}
	c.OutboundPort = DefaultOutboundPort
	if tp := svc.Proxy.TransparentProxy; tp != nil && tp.OutboundListenerPort != 0 {
		c.OutboundPort = tp.OutboundListenerPort
	}
	for _, k := range []string{"envoy_prometheus_bind_addr", "envoy_stats_bind_addr"} {
		s, _ := svc.Proxy.Config[k].(string)
		if s == "" {
			continue
		}
		_, port, err := net.SplitHostPort(s)
		if err != nil {
			return c, fmt.Errorf("proxy %q: config %s %q: %v: %w", svc.ID, k, s, err, ErrConfig)
		}
		c.ExcludeInboundPorts = append(c.ExcludeInboundPorts, port)
	}
	for _, p := range svc.Proxy.Expose.Paths {
		if p.ListenerPort != 0 {
			c.ExcludeInboundPorts = append(c.ExcludeInboundPorts, strconv.Itoa(p.ListenerPort))
		}
	}
	return c, nil
}

// intConfig reads a number from opaque proxy config (JSON numbers are
// float64; HCL may give strings).
func intConfig(v any) (int, bool) {
	switch x := v.(type) {
	case float64:
		return int(x), true
	case int:
		return x, true
	case string:
		n, err := strconv.Atoi(x)
		return n, err == nil
	}
	return 0, false
}

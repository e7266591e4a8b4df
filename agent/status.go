package agent

import (
	"fmt"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// readiness is /readyz's answer for the relayed keys: not ready while a
// key has nothing to serve or cannot sync (its streams reach a replica
// and fail: over max_message_size, say), naming the first such key and
// why. Serving the last good config while the central bridge is
// unreachable is ready, and said so. A key the central bridge refuses
// to this agent is not the agent's failure: its proxies are refused with
// the reason, and it is listed, not counted.
func readiness(keys []keyStatus) (int, string) {
	code, status := 200, "ready"
	for _, k := range keys {
		switch {
		case k.Refused != "":
		case k.SyncError != "":
			if code == 200 {
				code, status = 503, "node.cluster "+k.NodeCluster+" cannot sync from the central bridge: "+k.SyncError
			}
		case k.Serving == "":
			if code == 200 {
				code, status = 503, "waiting for the central bridge for node.cluster "+k.NodeCluster
				if k.Error != "" {
					status += ": " + k.Error
				}
			}
		case k.Upstream == "" && code == 200:
			status = "serving the last good config; central bridge unreachable"
		}
	}
	return code, status
}

// proxyView is a local proxy on /v1/proxies: the server's status and
// the relay of its node.cluster (upstream, errors, refusal).
type proxyView struct {
	serve.ProxyStatus
	Relay *keyStatus `json:"relay,omitempty"`
	// Envoy is set for a proxy the agent runs (an envoy block): its
	// epoch, version (from /server_info), readiness and restarts.
	Envoy *EnvoyStatus `json:"envoy,omitempty"`
}

func (a *Agent) proxies() []proxyView {
	keys := a.keys()
	ps := a.server.Proxies()
	envoys := a.envoyStatuses()
	out := make([]proxyView, len(ps))
	for i, p := range ps {
		out[i].ProxyStatus = p
		for j := range envoys {
			if envoys[j].NodeID == p.NodeID {
				out[i].Envoy = &envoys[j]
			}
		}
		for j := range keys {
			if keys[j].NodeCluster == p.NodeCluster {
				out[i].Relay = &keys[j]
				break
			}
		}
	}
	return out
}

// relayRefused is why the central bridge refuses key to this agent, ""
// if it does not.
func (a *Agent) relayRefused(key string) string {
	a.mu.Lock()
	r := a.relays[key]
	a.mu.Unlock()
	if r == nil {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

// warnSocket says at start what the socket's settings let through.
func (a *Agent) warnSocket() {
	if m := a.cfg.SocketMode; m&0o007 != 0 {
		a.log.Warn().Str("socket", a.cfg.Socket).Str("socket_mode", fmt.Sprintf("%04o", uint32(m))).
			Msg("the agent socket lets every local user connect: any process may claim an allowed group and get its config; set socket_mode = \"0660\" and socket_group to the proxies' group (Connect leaves still go only to their allowed users)")
	}
	if a.cfg.TCP != "" && len(a.cfg.ConnectServices) > 0 {
		a.log.Warn().Str("tcp", a.cfg.TCP).
			Msg("the agent's TCP listener cannot tell who connects: proxies acting for a connect service are refused on it and must use the Unix socket")
	}
}

package agent

import "github.com/prometheus/client_golang/prometheus"

// NotReadyReason says why the agent is not ready, as /readyz does, or ""
// when /readyz answers 200. The CLI reports it to systemd (STATUS=) and
// sends READY=1 when it turns "". Valid after Started.
func (a *Agent) NotReadyReason() string {
	if code, status, _, _ := a.readyz(); code != 200 {
		return status
	}
	return ""
}

// readyz is /readyz's answer: the relayed keys' readiness, then the
// Envoys' (an envoy block's Envoy not yet LIVE and ACKed is not ready).
// NotReadyReason and the handler share it so that systemd hears READY=1
// only when /readyz answers 200.
func (a *Agent) readyz() (code int, status string, keys []keyStatus, envoys []EnvoyStatus) {
	keys = a.keys()
	code, status = readiness(keys)
	envoys = a.envoyStatuses()
	if c, s := envoyReadiness(envoys); c != 200 && code == 200 {
		code, status = c, s
	}
	return code, status, keys, envoys
}

// Registerer is the registry served on the agent's /metrics, for metrics
// the CLI adds (build_info).
func (a *Agent) Registerer() prometheus.Registerer { return a.reg }

package agent

import "github.com/prometheus/client_golang/prometheus"

// NotReadyReason says why the agent is not ready, as /readyz does, or ""
// when /readyz answers 200. The CLI reports it to systemd (STATUS=) and
// sends READY=1 when it turns "". Valid after Started.
func (a *Agent) NotReadyReason() string {
	if code, status := readiness(a.keys()); code != 200 {
		return status
	}
	return ""
}

// Registerer is the registry served on the agent's /metrics, for metrics
// the CLI adds (build_info).
func (a *Agent) Registerer() prometheus.Registerer { return a.reg }

package bridge

import (
	"cmp"
	"fmt"

	"github.com/hashicorp/consul/api"
)

// NotReadyReason says why the daemon is not ready, as /readyz does, or ""
// when /readyz answers 200. The CLI reports it to systemd (STATUS=) and
// sends READY=1 when it turns "".
func (d *Daemon) NotReadyReason() string { return d.notReadyReason() }

// consulAddress is the local Consul agent the bridge asks: the
// configured address, else what Consul's own tools use
// (CONSUL_HTTP_ADDR, then 127.0.0.1:8500).
func (d *Daemon) consulAddress() string {
	return cmp.Or(d.cfg.Settings.Consul.Address, api.DefaultConfig().Address)
}

// consulFailure names the local Consul and the error of its last request
// while its requests fail ("" while they succeed), for /readyz: an
// operator reading "waiting for the first complete Consul sync" needs to
// know which address and why.
func (d *Daemon) consulFailure() string {
	err := d.outages.lastError("")
	if err == nil {
		return ""
	}
	return fmt.Sprintf("Consul at %s: %v", d.consulAddress(), err)
}

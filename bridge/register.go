package bridge

import (
	"cmp"
	"context"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"
)

// registerTTL is the check's TTL; the bridge reports every registerTTL/3,
// so a bridge that hangs or dies turns critical within registerTTL.
const registerTTL = 10 * time.Second

// register keeps the bridge registered in the local Consul agent while it
// runs (consul.register): a service on the xDS port whose TTL check passes
// only while the bridge is ready, so per-VM agents that find replicas by
// service (agent upstream consul_service) use ready bridges only. It
// deregisters on the way out; a bridge that is killed is removed by
// Consul after its check has been critical for a minute.
func (d *Daemon) register(ctx context.Context, client *api.Client, xdsAddr net.Addr) {
	r := d.cfg.Settings.Consul.Register
	host, portStr, _ := net.SplitHostPort(xdsAddr.String())
	port, _ := strconv.Atoi(portStr)
	if port == 0 {
		d.log.Error().Str("xds_listen", xdsAddr.String()).Msg("consul.register needs the xds listener on TCP; not registering")
		return
	}
	if r.Address != "" {
		host = r.Address
	} else if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		// A wildcard listen (0.0.0.0, ::) is no address anyone can dial:
		// the service gets none, and Consul's catalog gives its node's,
		// which agents (upstream consul_service) dial instead.
		host = ""
	}
	id := r.Name + "-" + net.JoinHostPort(host, portStr)
	checkID := "service:" + id
	reg := &api.AgentServiceRegistration{
		ID: id, Name: r.Name, Address: host, Port: port, Tags: r.Tags,
		Meta: map[string]string{"xds": "ads"},
		Check: &api.AgentServiceCheck{CheckID: checkID, Name: "consul-xds-bridge ready", TTL: registerTTL.String(),
			DeregisterCriticalServiceAfter: "1m"},
	}
	log := d.log.With().Str("service", r.Name).Str("service_id", id).Logger()
	registered := false
	tick := time.NewTicker(registerTTL / 3)
	defer tick.Stop()
	for {
		if !registered {
			if err := client.Agent().ServiceRegister(reg); err != nil {
				log.Warn().Err(err).Msg("cannot register the bridge in Consul; retrying")
			} else {
				registered = true
				log.Info().Str("address", cmp.Or(host, "(the node's)")+" port "+portStr).Msg("registered in Consul")
			}
		}
		if registered {
			status, note := api.HealthPassing, "ready"
			if !d.ready.Load() {
				status, note = api.HealthCritical, "not ready: "+d.notReadyReason()
			}
			if err := client.Agent().UpdateTTL(checkID, note, status); err != nil {
				registered = false // the agent may have lost it (restart): register again
				log.Warn().Err(err).Msg("cannot update the bridge's check in Consul")
			}
		}
		select {
		case <-ctx.Done():
			if registered {
				if err := client.Agent().ServiceDeregister(id); err != nil {
					log.Warn().Err(err).Msg("cannot deregister the bridge from Consul")
				}
			}
			return
		case <-tick.C:
		}
	}
}

// Package bridge joins the Consul catalog with routing policy into the model
// the proxies get (Build, pure), and runs the daemon around it: watches,
// debounce, readiness and serving.
package bridge

import (
	"fmt"
	"net/netip"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// maxWeight keeps the sum of weights in one locality far below Envoy's
// uint32 limit even with tens of thousands of endpoints, while preserving
// Consul's full weight range.
const maxWeight = 65535

// Build resolves what proxies should get from a catalog and a policy. It is
// pure: no I/O, no clock, output sorted. Odd catalog data (an instance whose
// address is a hostname, a zero port) is left out and reported as a warning,
// never an error, so one bad registration cannot stop a fleet's updates.
func Build(cat *consul.Catalog, _ *policy.Policy) (*ir.Model, []string) {
	m := &ir.Model{}
	var warnings []string
	if cat == nil {
		return m, nil
	}
	for _, svc := range cat.Services {
		c := ir.Cluster{
			Name:           svc.Name,
			ConnectTimeout: policy.DefaultConnectTimeout,
			LBPolicy:       ir.LBRoundRobin,
		}
		for _, in := range svc.Instances {
			ep, warn := endpoint(in, svc.Datacenter)
			if warn != "" {
				warnings = append(warnings, fmt.Sprintf("service %q instance %q on node %q: %s", svc.Name, in.ID, in.Node, warn))
				continue
			}
			c.Endpoints = append(c.Endpoints, ep)
		}
		m.Clusters = append(m.Clusters, c)
	}
	return m, warnings
}

func endpoint(in consul.Instance, dc string) (ir.Endpoint, string) {
	addr, err := netip.ParseAddr(in.Address)
	if err != nil {
		return ir.Endpoint{}, fmt.Sprintf("address %q is not an IP address; EDS endpoints must be IPs, so it is skipped", in.Address)
	}
	if in.Port <= 0 || in.Port > 65535 {
		return ir.Endpoint{}, fmt.Sprintf("port %d is out of range; skipped", in.Port)
	}
	health, weight := healthAndWeight(in)
	region := in.Datacenter
	if region == "" {
		region = dc
	}
	zone := in.NodeMeta["zone"]
	if zone == "" {
		zone = in.NodeMeta["availability_zone"]
	}
	return ir.Endpoint{
		Address:  addr.Unmap(),
		Port:     uint32(in.Port),
		Health:   health,
		Weight:   weight,
		Locality: ir.Locality{Region: region, Zone: zone},
	}, ""
}

// healthAndWeight maps Consul's view to Envoy's. Warning counts as healthy
// (Consul's own default for DNS and Connect) at the warning weight. A weight
// Consul set to 0 means "send nothing", which Envoy can only express as
// UNHEALTHY: its weights must be at least 1.
func healthAndWeight(in consul.Instance) (ir.Health, uint32) {
	passing, warning := in.WeightPassing, in.WeightWarning
	if passing == 0 && warning == 0 {
		// Both unset: data that never went through Consul's defaulting.
		passing, warning = 1, 1
	}
	var (
		health = ir.Healthy
		weight = passing
	)
	switch in.Status {
	case consul.StatusWarning:
		weight = warning
	case consul.StatusCritical:
		health = ir.Unhealthy
	case consul.StatusMaintenance:
		health = ir.Draining
	}
	if weight < 1 {
		if health == ir.Healthy {
			health = ir.Unhealthy
		}
		weight = 1
	}
	return health, uint32(min(weight, maxWeight))
}

package policy

import (
	"slices"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Mesh is the top-level `mesh` block: how the bridge serves Consul
// Connect sidecars.
type Mesh struct {
	// Mode is MeshAgent (the per-VM agent serves each sidecar its leaf
	// from the local Consul agent; keys stay on the VM) or MeshCentral
	// (the bridge fetches every sidecar's leaf and serves it over SDS).
	Mode string
	// DefaultIntention is "allow" or "deny" for callers no intention
	// matches; "" follows Consul: allow when ACLs are off or their
	// default_policy is allow, deny otherwise.
	DefaultIntention ir.IntentionAction
	Source           string
	// ModeRange is where mode is written (the block when it is not), for
	// diagnostics about what central mode implies.
	ModeRange hcl.Range
}

// Mesh modes.
const (
	MeshAgent   = "agent"
	MeshCentral = "central"
)

type meshBlock struct {
	Mode             *string   `hcl:"mode,optional"`
	DefaultIntention *string   `hcl:"default_intention,optional"`
	Body             hcl.Body  `hcl:",body"`
	DefRange         hcl.Range `hcl:",def_range"`
}

// mesh resolves the mesh blocks of every document: at most one.
func (r *resolver) mesh(docs []*Document) {
	var prev *meshBlock
	for _, d := range docs {
		b := d.mesh
		if b == nil {
			continue
		}
		if prev != nil {
			r.add(b.DefRange, "Duplicate mesh block", "Only one mesh block is allowed across all files and KV documents; previous definition at %s.", pos(prev.DefRange))
			continue
		}
		prev = b
		m := &Mesh{Mode: MeshAgent, Source: pos(b.DefRange), ModeRange: valueRange(b.Body, "mode", b.DefRange)}
		if b.Mode != nil {
			if !oneOf(*b.Mode, []string{MeshAgent, MeshCentral}) {
				r.add(valueRange(b.Body, "mode", b.DefRange), "Invalid mesh mode",
					"mode is %q; it is \"agent\" (the per-VM agent serves leaf certificates from its local Consul agent) or \"central\" (the bridge fetches and serves them).", *b.Mode)
			} else {
				m.Mode = *b.Mode
			}
		}
		if b.DefaultIntention != nil {
			switch a := ir.IntentionAction(*b.DefaultIntention); a {
			case ir.IntentionAllow, ir.IntentionDeny:
				m.DefaultIntention = a
			default:
				r.add(valueRange(b.Body, "default_intention", b.DefRange), "Invalid default_intention",
					"default_intention is %q; it is \"allow\" or \"deny\" (leave it out to follow Consul's ACL default policy).", *b.DefaultIntention)
			}
		}
		r.pol.Mesh = m
	}
}

// sidecarFor checks a proxy block's sidecar_for: such a group's listeners
// and clusters come from the service's sidecar registration, so it
// declares none of its own.
func (r *resolver) sidecarFor(b *proxyBlock, p *Proxy) {
	svc := *b.SidecarFor
	rng := valueRange(b.Body, "sidecar_for", b.DefRange)
	if !ir.QueryableServiceName(svc) {
		r.add(rng, "Invalid service name", unqueryable, svc)
		return
	}
	p.SidecarFor = svc
	what := ""
	switch {
	case len(b.Listeners) > 0:
		what = "listener blocks"
	case b.Proxyless != nil && *b.Proxyless:
		what = "proxyless = true"
	case len(b.Upstreams) > 0:
		what = "upstreams"
	case b.LocalService != nil:
		what = "local_service"
	}
	if what != "" {
		r.add(rng, "sidecar_for with "+what, "proxy %q is sidecar_for = %q: its listeners and upstreams come from %s's Connect sidecar registration. Remove the %s, or sidecar_for.", b.Name, svc, svc, what)
	}
}

// UsesMesh reports whether the policy serves Connect sidecars: a mesh
// block, or a proxy group declared sidecar_for.
func (p *Policy) UsesMesh() bool {
	return p != nil && (p.Mesh != nil || slices.ContainsFunc(p.Proxies, func(pr *Proxy) bool { return pr.SidecarFor != "" }))
}

// CentralMesh reports whether the bridge serves the sidecars' leaves.
func (p *Policy) CentralMesh() bool {
	return p != nil && p.Mesh != nil && p.Mesh.Mode == MeshCentral
}

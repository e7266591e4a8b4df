package consul

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Fixture is a catalog written down as JSON, in the shape Consul's own API
// returns, so operators can paste `curl /v1/health/service/NAME` output:
//
//	{"datacenter": "dc1", "services": {"web": [ <ServiceEntry>, ... ]},
//	 "remote": {"dc2": {"web": [ <ServiceEntry>, ... ]}}}
//
// services holds the local datacenter's services; the optional remote object
// holds other datacenters' (as `curl /v1/health/service/NAME?dc=dc2` returns
// them), keyed by datacenter, for failover. Golden tests and offline
// commands read catalogs in this form.
type Fixture struct {
	Datacenter string                         `json:"datacenter"`
	Services   map[string][]*api.ServiceEntry `json:"services"`
	// Remote maps a datacenter to its services; they land in the catalog
	// under that datacenter, as the watcher stores a remote target.
	Remote map[string]map[string][]*api.ServiceEntry `json:"remote,omitempty"`
	// Mesh, if present, is Consul Connect's state (Catalog.Mesh).
	Mesh *MeshFixture `json:"mesh,omitempty"`
}

// MeshFixture is a mesh written down in Consul's API shapes: proxies as
// `curl /v1/health/service/NAME-sidecar-proxy` returns them, intentions
// as `curl /v1/config/service-intentions`. Leaves and roots are not part
// of it (no keys in fixtures).
type MeshFixture struct {
	TrustDomain      string              `json:"trust_domain"`
	DefaultIntention string              `json:"default_intention,omitempty"`
	Proxies          []*api.ServiceEntry `json:"proxies"`
	// Connect holds `curl /v1/health/connect/NAME` by NAME, for the
	// upstreams; without it the registered sidecars stand in.
	Connect    map[string][]*api.ServiceEntry      `json:"connect,omitempty"`
	Intentions []*api.ServiceIntentionsConfigEntry `json:"intentions,omitempty"`
	Protocols  map[string]string                   `json:"protocols,omitempty"`
}

// ReadFixtureFile reads the catalog fixture in the file at path; errors
// name the file.
func ReadFixtureFile(path string) (*Catalog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cat, err := ReadFixture(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cat, nil
}

// ReadFixture decodes a catalog fixture. Unknown fields are ignored, as
// output from newer Consul versions may carry fields this client lacks.
func ReadFixture(r io.Reader) (*Catalog, error) {
	dec := json.NewDecoder(r)
	var f Fixture
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("catalog fixture: %w", err)
	}
	services := make([]*Service, 0, len(f.Services))
	for name, entries := range f.Services {
		if name == "" {
			return nil, fmt.Errorf("catalog fixture: a service has an empty name")
		}
		services = append(services, NewService(name, "", 0, entries))
	}
	for dc, byName := range f.Remote {
		if dc == "" {
			return nil, fmt.Errorf("catalog fixture: a remote datacenter has an empty name")
		}
		for name, entries := range byName {
			if name == "" {
				return nil, fmt.Errorf("catalog fixture: a service in datacenter %q has an empty name", dc)
			}
			services = append(services, NewService(name, dc, 0, entries))
		}
	}
	cat := NewCatalog(services)
	if m := f.Mesh; m != nil {
		cat.Mesh = &Mesh{
			TrustDomain: m.TrustDomain, DefaultIntention: ir.IntentionAction(m.DefaultIntention),
			Proxies: NewProxies(m.Proxies), Intentions: m.Intentions, Protocols: m.Protocols,
		}
		for name, entries := range m.Connect {
			if cat.Mesh.Endpoints == nil {
				cat.Mesh.Endpoints = map[string][]Proxy{}
			}
			cat.Mesh.Endpoints[name] = newConnectEndpoints(entries)
		}
	}
	return cat, nil
}

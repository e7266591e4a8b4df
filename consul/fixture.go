package consul

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/hashicorp/consul/api"
)

// Fixture is a catalog written down as JSON, in the shape Consul's own API
// returns, so operators can paste `curl /v1/health/service/NAME` output:
//
//	{"datacenter": "dc1", "services": {"web": [ <ServiceEntry>, ... ]}}
//
// Golden tests and offline commands read catalogs in this form.
type Fixture struct {
	Datacenter string                         `json:"datacenter"`
	Services   map[string][]*api.ServiceEntry `json:"services"`
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
	return NewCatalog(services), nil
}

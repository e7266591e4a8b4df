// Package consul watches the Consul catalog, health and KV with blocking
// queries and emits immutable, sorted snapshots of them, each with what it
// changed. It knows nothing about Envoy or about what the KV documents say.
//
// It imports ir, the one package below it, for two words of vocabulary:
// ir.IntentionAction (Consul's default intention, as the model uses it)
// and ir.Redacted (a Connect leaf's private key, which must never print).
// ir imports nothing of ours, so this crossing adds no cycle and no
// knowledge of later stages: a second copy of either type would have to
// be converted at every use and could drift (a key type that prints).
package consul

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"
)

// Status is the aggregated health of one instance, as Consul reports it.
type Status string

// Statuses, ordered from best to worst by [Status.rank]. Maintenance is kept
// apart from critical because proxies should drain, not fail, such instances.
const (
	StatusPassing     Status = "passing"
	StatusWarning     Status = "warning"
	StatusCritical    Status = "critical"
	StatusMaintenance Status = "maintenance"
)

// Catalog is one consistent view of the services the bridge watches.
// It is never mutated after it is built; share it freely.
type Catalog struct {
	// Services sorted by (Datacenter, Name).
	Services []*Service `json:"services"`
	// Mesh is Consul Connect's state (mesh.go), nil when the bridge does
	// not follow it. The daemon sets it beside the services it watches.
	Mesh *Mesh `json:"mesh,omitempty"`
}

// Service is every instance of one Consul service in one datacenter.
type Service struct {
	Name string `json:"name"`
	// Datacenter is "" for a service watched in the local datacenter
	// without naming it, and otherwise the datacenter named, as in
	// [ServiceKey].
	Datacenter string `json:"datacenter,omitempty"`
	// Index is Consul's X-Consul-Index of the health query that produced it.
	Index     uint64     `json:"index"`
	Instances []Instance `json:"instances"`
}

// Instance is one registered service instance with its aggregated health.
type Instance struct {
	ID         string            `json:"id"`
	Node       string            `json:"node"`
	Datacenter string            `json:"datacenter,omitempty"`
	Address    string            `json:"address"`
	Port       int               `json:"port"`
	Tags       []string          `json:"tags,omitempty"`
	Meta       map[string]string `json:"meta,omitempty"`
	NodeMeta   map[string]string `json:"node_meta,omitempty"`
	Status     Status            `json:"status"`
	// Weights are Consul's DNS/LB weights; zero values mean "unset" (Consul's
	// default is 1 for both).
	WeightPassing int     `json:"weight_passing"`
	WeightWarning int     `json:"weight_warning"`
	Checks        []Check `json:"checks,omitempty"`
}

// Check is one health check on an instance or its node.
type Check struct {
	ID     string `json:"id"`
	Name   string `json:"name,omitempty"`
	Status string `json:"status"`
}

// Service returns the named service of datacenter dc ("" is the local
// datacenter, as in [ServiceKey]), or nil if it is not in the catalog.
func (c *Catalog) Service(dc, name string) *Service {
	if c == nil {
		return nil
	}
	i, ok := slices.BinarySearchFunc(c.Services, [2]string{dc, name}, func(s *Service, k [2]string) int {
		return cmp.Or(cmp.Compare(s.Datacenter, k[0]), cmp.Compare(s.Name, k[1]))
	})
	if !ok {
		return nil
	}
	return c.Services[i]
}

// NewCatalog sorts services into a Catalog. It takes ownership of the slice.
func NewCatalog(services []*Service) *Catalog {
	slices.SortFunc(services, func(a, b *Service) int {
		return cmp.Or(cmp.Compare(a.Datacenter, b.Datacenter), cmp.Compare(a.Name, b.Name))
	})
	return &Catalog{Services: services}
}

// NewService normalises a /v1/health/service response: it copies what the
// bridge needs, falls back to the node address when the service has none,
// aggregates check status, and sorts everything so equal data compares equal.
// Entries without a node or service are skipped: Consul never sends them, and
// a malformed response must not crash the watcher.
func NewService(name, dc string, index uint64, entries []*api.ServiceEntry) *Service {
	s := &Service{Name: name, Datacenter: dc, Index: index, Instances: make([]Instance, 0, len(entries))}
	for _, e := range entries {
		if e == nil || e.Node == nil || e.Service == nil {
			continue
		}
		addr := e.Service.Address
		if addr == "" {
			addr = e.Node.Address
		}
		in := Instance{
			ID:         e.Service.ID,
			Node:       e.Node.Node,
			Datacenter: e.Node.Datacenter,
			Address:    addr,
			Port:       e.Service.Port,
			Tags:       sortedCopy(e.Service.Tags),
			Meta:       mapCopy(e.Service.Meta),
			NodeMeta:   mapCopy(e.Node.Meta),
			Status:     aggregate(e.Checks),
		}
		in.WeightPassing, in.WeightWarning = e.Service.Weights.Passing, e.Service.Weights.Warning
		for _, c := range e.Checks {
			if c == nil {
				continue
			}
			in.Checks = append(in.Checks, Check{ID: c.CheckID, Name: c.Name, Status: c.Status})
		}
		slices.SortFunc(in.Checks, func(a, b Check) int { return strings.Compare(a.ID, b.ID) })
		s.Instances = append(s.Instances, in)
	}
	slices.SortFunc(s.Instances, func(a, b Instance) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.ID, b.ID))
	})
	return s
}

// aggregate is Consul's own precedence (api.HealthChecks.AggregatedStatus:
// maintenance > critical > warning > passing), with maintenance kept apart
// so it can map to DRAINING. A status Consul's client cannot classify is
// critical: never send traffic to an instance whose health we do not
// understand. Check output is deliberately not part of the snapshot: it
// changes on every TTL heartbeat and would turn into pushes that change
// nothing for a proxy.
func aggregate(checks api.HealthChecks) Status {
	if slices.Contains(checks, nil) {
		// AggregatedStatus dereferences every entry; Consul never sends
		// nil ones, but a malformed response must not crash the watcher.
		checks = slices.DeleteFunc(slices.Clone(checks), func(c *api.HealthCheck) bool { return c == nil })
	}
	switch checks.AggregatedStatus() {
	case api.HealthMaint:
		return StatusMaintenance
	case api.HealthPassing:
		return StatusPassing
	case api.HealthWarning:
		return StatusWarning
	default:
		return StatusCritical
	}
}

// WorseThan reports whether s is a worse health state than o
// (passing < warning < critical < maintenance).
func (s Status) WorseThan(o Status) bool { return s.rank() > o.rank() }

func (s Status) rank() int {
	switch s {
	case StatusPassing:
		return 0
	case StatusWarning:
		return 1
	case StatusCritical:
		return 2
	default:
		return 3
	}
}

// equalService reports whether two snapshots of a service carry the same
// data; the index is ignored because it moves on unrelated writes.
func equalService(a, b *Service) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Name == b.Name && a.Datacenter == b.Datacenter &&
		slices.EqualFunc(a.Instances, b.Instances, equalInstance)
}

func equalInstance(a, b Instance) bool {
	return a.ID == b.ID && a.Node == b.Node && a.Datacenter == b.Datacenter &&
		a.Address == b.Address && a.Port == b.Port && a.Status == b.Status &&
		a.WeightPassing == b.WeightPassing && a.WeightWarning == b.WeightWarning &&
		slices.Equal(a.Tags, b.Tags) && maps.Equal(a.Meta, b.Meta) && maps.Equal(a.NodeMeta, b.NodeMeta) &&
		slices.Equal(a.Checks, b.Checks)
}

func sortedCopy(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

func mapCopy(in map[string]string) map[string]string {
	if len(in) == 0 {
		return nil
	}
	return maps.Clone(in)
}

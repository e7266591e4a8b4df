package bench

import (
	"cmp"
	"slices"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// decodeMemo lets the simulated Envoys of a fleet share the decoding of
// identical resource bytes (FleetConfig.SharedDecode). Each real Envoy
// decodes what it receives on its own CPU; a thousand simulated ones on
// the load generator's one core decode the same bytes a thousand times,
// which made the load generator, not the server, what S1 measured (it
// spent twice the bridge's CPU per change at N = 1000). With the memo the
// first client to receive an encoding decodes it in full, as before, and
// the others reuse the result; every client still receives, counts,
// probes and ACKs every response itself.
type decodeMemo struct {
	mu sync.Mutex
	m  [numTypes]map[string]memoEntry
	n  int
}

type memoEntry struct {
	d   decoded
	cla *endpointv3.ClusterLoadAssignment // EDS: probed per client
}

// maxMemo bounds the memo (~1 KiB an entry); it starts afresh beyond.
const maxMemo = 100_000

func (m *decodeMemo) get(t Type, b []byte) (memoEntry, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[t][string(b)]
	return e, ok
}

func (m *decodeMemo) put(t Type, b []byte, e memoEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n >= maxMemo {
		m.m, m.n = [numTypes]map[string]memoEntry{}, 0
	}
	if m.m[t] == nil {
		m.m[t] = map[string]memoEntry{}
	}
	m.m[t][string(b)] = e
	m.n++
}

func (c *Client) decode(t Type, a *anypb.Any, probe *Probe) (decoded, error) {
	memo := c.f.memo
	if memo == nil {
		e, err := decodeResource(t, a)
		if err == nil && t == EDS && probe != nil && probe.Cluster == "" {
			e.d.matched = probe.matches(e.cla)
		}
		return e.d, err
	}
	e, ok := memo.get(t, a.GetValue())
	if !ok {
		var err error
		if e, err = decodeResource(t, a); err != nil {
			return decoded{}, err
		}
		memo.put(t, a.GetValue(), e)
	}
	d := e.d
	d.routes = slices.Clone(d.routes) // the client's own
	if t == EDS && probe != nil && probe.Cluster == "" {
		d.matched = probe.matches(e.cla)
	}
	return d, nil
}

// decodeResource unmarshals a into its Envoy type, as Envoy does, and
// keeps what the client uses of it.
func decodeResource(t Type, a *anypb.Any) (memoEntry, error) {
	var e memoEntry
	d := &e.d
	switch t {
	case CDS:
		m := new(clusterv3.Cluster)
		if err := a.UnmarshalTo(m); err != nil {
			return e, err
		}
		d.name = m.GetName()
		if m.GetType() == clusterv3.Cluster_EDS {
			d.eds = cmp.Or(m.GetEdsClusterConfig().GetServiceName(), m.GetName())
		}
	case EDS:
		m := new(endpointv3.ClusterLoadAssignment)
		if err := a.UnmarshalTo(m); err != nil {
			return e, err
		}
		d.name = m.GetClusterName()
		e.cla = m
	case LDS:
		m := new(listenerv3.Listener)
		if err := a.UnmarshalTo(m); err != nil {
			return e, err
		}
		d.name = m.GetName()
		var err error
		if d.routes, err = routeNames(m); err != nil {
			return e, err
		}
	case RDS:
		m := new(routev3.RouteConfiguration)
		if err := a.UnmarshalTo(m); err != nil {
			return e, err
		}
		d.name = m.GetName()
	}
	return e, nil
}

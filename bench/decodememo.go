package bench

import (
	"sync"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
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

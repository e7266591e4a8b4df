package serve

import "github.com/envoyproxy/go-control-plane/pkg/cache/types"

// Test-only views of the serving cache, for this package's tests and the
// xds_test package's.

// Served returns the resources of typeURL served under a node.cluster
// key, as cached: shared with every stream, unredacted, not to be
// modified. nil if the key was never served.
func (s *Server) Served(key, typeURL string) map[string]types.Resource {
	sets := s.cache.served(key)
	if sets == nil {
		return nil
	}
	ts := sets[typeURL]
	if ts == nil {
		return nil
	}
	return ts.resources()
}

// waiting counts the watches open on key.
func (c *serveCache) waiting(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	if k := c.keys[key]; k != nil {
		for _, ws := range k.sotw {
			n += len(ws)
		}
		for _, ws := range k.delta {
			n += len(ws)
		}
	}
	return n
}

// resources returns the set's resources by name, as go-control-plane
// snapshots hold them.
func (ts *typeSet) resources() map[string]types.Resource {
	out := make(map[string]types.Resource, len(ts.entries))
	for n, e := range ts.entries {
		out[n] = e.res
	}
	return out
}

// versionsOf returns the version of each type a key is served.
func (s *Server) versionsOf(key string) map[string]string {
	out := map[string]string{}
	for typ, ts := range s.cache.served(key) {
		out[typ] = ts.version
	}
	return out
}

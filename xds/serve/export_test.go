package serve

import "github.com/envoyproxy/go-control-plane/pkg/cache/types"

// Test-only views of the serving cache, for this package's tests and the
// xds_test package's.

// Served returns the resources of typeURL served under a node.cluster
// key, as cached: shared with every stream, unredacted, not to be
// modified. nil if the key was never served.
func (s *Server) Served(key, typeURL string) map[string]types.Resource {
	sets := s.cache.Served(key)
	if sets == nil {
		return nil
	}
	ts := sets[typeURL]
	if ts == nil {
		return nil
	}
	return ts.Resources()
}

// versionsOf returns the version of each type a key is served.
func (s *Server) versionsOf(key string) map[string]string {
	out := map[string]string{}
	for typ, ts := range s.cache.Served(key) {
		out[typ] = ts.Version()
	}
	return out
}

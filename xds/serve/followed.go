package serve

import resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

// FollowedClusters lists, sorted, the clusters whose load assignments
// are served to some connected stream's node.cluster: the services
// connected proxies follow, which the Consul watcher keeps a query slot
// for while its views take turns (consul.Watcher.SetFollowed).
func (s *Server) FollowedClusters() []string {
	return s.cache.ServedToStreams(resourcev3.EndpointType)
}

// ServedGeneration changes whenever FollowedClusters may have: a
// node.cluster gets its first stream or loses its last, or the names of
// the load assignments it is served change (not their endpoints).
func (s *Server) ServedGeneration() uint64 { return s.cache.Generation() }

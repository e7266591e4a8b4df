package bridge

import (
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline"
)

// followInterval is how often the loop tells the Consul watcher which
// services connected proxies follow (consul.Watcher.SetFollowed). Proxies
// connect and leave without a build, so the loop looks on a timer; it
// recomputes only when what streams are served or the world changed.
const followInterval = time.Second

// followState is what the loop last told the watcher.
type followState struct {
	told     bool
	gen      uint64
	world    *pipeline.World
	clusters []string // FollowedClusters at gen
}

// refreshFollowed tells the watcher the Consul services whose instances
// feed a cluster some connected proxy is served, so that while its views
// take turns for query slots, those keep one of their own: a change to a
// service proxies follow is seen by its own blocking query, not after its
// turn or through the health hint.
func (l *loop) refreshFollowed() {
	if !l.watcher.Oversubscribed() {
		if l.follow.told {
			l.watcher.SetFollowed(nil)
			l.follow = followState{}
		}
		return
	}
	// What streams are served is walked again only when it may have
	// changed (not on a flip); the clusters are mapped to Consul
	// services again for every new world, which is cheap.
	gen, w := l.d.xds.ServedGeneration(), l.memo.LastWorld()
	if l.follow.told && gen == l.follow.gen && w == l.follow.world {
		return
	}
	if !l.follow.told || gen != l.follow.gen {
		l.follow.clusters = l.d.xds.FollowedClusters()
	}
	l.watcher.SetFollowed(l.memo.ServicesFeeding(l.follow.clusters))
	l.follow.told, l.follow.gen, l.follow.world = true, gen, w
}

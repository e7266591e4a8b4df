package xds

import (
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"
)

// nackGuard is the snapshot cache as the xDS server sees it, with one
// change: a SotW client that rejected a version is not sent that version
// again until it changes.
//
// Why: a SotW NACK carries the last version the client accepted in
// version_info. go-control-plane's snapshot cache compares that with the
// snapshot's version, finds them different and answers at once with the
// same rejected version; a client that keeps rejecting it gets it again
// and again, forever. (Delta has no such loop: the delta server records
// what it sent as returned, so a NACK finds nothing new to send.)
//
// How: the callbacks see every request just before the server hands the
// same request to CreateWatch. When a request stands for a rejected
// response (a NACK, or a later request still carrying the NACKed nonce),
// the tracker registers the version that was rejected, and CreateWatch
// opens the watch as if the client held it. The cache then waits for a
// snapshot with another version for that type — the next change, since
// versions are content hashes — and sends that. The client's real
// version_info stays in the tracker (version_acked on /v1/proxies).
type nackGuard struct {
	cachev3.SnapshotCache
	tracker *tracker
}

var _ cachev3.Cache = nackGuard{}

func (g nackGuard) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	if v, ok := g.tracker.takeRewrite(req); ok {
		r := proto.Clone(req).(*discoveryv3.DiscoveryRequest)
		r.VersionInfo = v
		req = r
	}
	return g.SnapshotCache.CreateWatch(req, sub, ch)
}

package serve

import (
	"maps"
	"slices"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// Make-before-break. A proxy whose route moves to a new cluster must hold
// that cluster, warmed with its endpoints, before it gets the route; and
// it must stop routing to an old cluster before the cluster goes. Sent in
// one go, CDS (old cluster gone, new one warming) and RDS (pointing at the
// new one) open a window of 503s. Envoy's own rules are the reference: a
// cluster warms until its endpoints arrive, and listeners and routes
// should only name clusters the proxy already has.
//
// So an update that adds clusters and changes listeners or routes is
// served to an Envoy node.cluster in steps, each waiting (at most
// warmTimeout, then going on and counting it) until every stream of the
// key has acknowledged the step:
//
//  1. adding: the new clusters and endpoints beside the old ones, with the
//     old listeners and routes; done when each stream has ACKed (or
//     rejected) that CDS and, if it takes EDS, that EDS;
//  2. switching: the new listeners and routes, the old clusters still
//     there; done when each stream has answered that LDS and RDS;
//  3. the target: what the translation says, old clusters gone.
//
// A step that changes nothing is skipped: an update with no new cluster
// starts at 2, one that removes none ends at 2. Waiting holds nothing
// else up: a newer translation restarts the steps from what the key is
// served now, and other keys update at once. Proxyless gRPC clients are
// served in one step: they ask for clusters only once a route names them.
// Everything here holds Server.mu.

// defaultStepTimeout bounds each step's wait for a slow or stuck proxy
// (ServerConfig.StepTimeout).
const defaultStepTimeout = 5 * time.Second

// staging is a key's update in progress.
type staging struct {
	target map[string]*cache.Set // what the translation says
	step   int                   // 1 adding, 2 switching
	timer  *time.Timer
}

// stageLocked serves key the next step towards target, or target itself,
// and reports the type URLs whose served set changed. A key already in a
// step stays in it with the new target (a health flip during a policy
// change must not restart the wait, or a busy catalog would hold the
// change back for ever): the step's deadline stands.
func (s *Server) stageLocked(key string, target map[string]*cache.Set) []string {
	cur := s.cache.Served(key)
	st := s.staged[key]
	step := 0
	if _, proxyless := cache.ParseKey(key); !proxyless && cur != nil {
		routesChange := cur[resourcev3.ListenerType].Version() != target[resourcev3.ListenerType].Version() ||
			cur[resourcev3.RouteType].Version() != target[resourcev3.RouteType].Version()
		switch {
		case routesChange && st != nil && st.step == 1,
			routesChange && cache.Adds(target[resourcev3.ClusterType], cur[resourcev3.ClusterType]):
			step = 1 // new clusters, not acknowledged yet, for new routes
		case cache.Adds(cur[resourcev3.ClusterType], target[resourcev3.ClusterType]) && (routesChange || st != nil && st.step == 2):
			step = 2 // routes that stop using clusters, not acknowledged yet
		}
	}
	if step == 0 {
		s.unstageLocked(key)
		return s.cache.Set(key, target)
	}
	if st == nil || st.step != step {
		s.unstageLocked(key)
		st = &staging{step: step}
		st.timer = time.AfterFunc(s.cfg.StepTimeout, func() { s.stepTimedOut(key, st) })
		s.staged[key] = st
		s.stagedKeys.Store(int32(len(s.staged)))
	}
	st.target = target
	if step == 1 {
		s.tracker.expectEndpoints(key, cache.NewNames(target[resourcev3.EndpointType], cur[resourcev3.EndpointType]))
	}
	changed := s.cache.Set(key, s.stepSetsLocked(key, cur, st))
	s.advanceLocked(key) // nothing to wait for if no stream is there
	return changed
}

// stepSetsLocked is what key is served in st's step: the target's
// clusters, endpoints and secrets beside those it is served now, with its
// current listeners and routes (step 1) or the target's (step 2).
func (s *Server) stepSetsLocked(key string, cur map[string]*cache.Set, st *staging) map[string]*cache.Set {
	sets := maps.Clone(st.target)
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.SecretType} {
		sets[typ] = s.unionLocked(key, st.target[typ], cur[typ])
	}
	if st.step == 1 {
		sets[resourcev3.ListenerType], sets[resourcev3.RouteType] = cur[resourcev3.ListenerType], cur[resourcev3.RouteType]
	}
	return sets
}

// unstageAll ends every key's steps (the server is stopping).
func (s *Server) unstageAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key := range s.staged {
		s.unstageLocked(key)
	}
}

// unstageLocked ends key's steps, if any.
func (s *Server) unstageLocked(key string) {
	if st := s.staged[key]; st != nil {
		st.timer.Stop()
		delete(s.staged, key)
		s.stagedKeys.Store(int32(len(s.staged)))
		s.tracker.expectEndpoints(key, nil)
	}
}

// unionLocked is cache.Union, served in one step if it cannot be made.
func (s *Server) unionLocked(key string, target, cur *cache.Set) *cache.Set {
	ts, err := cache.Union(target, cur)
	if err != nil {
		// Names are unique by construction; never serve half a step.
		s.log.Error().Err(err).Str("node_cluster", key).Msg("cannot stage update; serving it in one step")
		return target
	}
	return ts
}

// streamAnswered is told every ACK and NACK: a staged key may go on. With
// nothing staged (nearly always) it takes no lock, so ACKs never queue
// behind an Update.
func (s *Server) streamAnswered(key string) {
	if s.stagedKeys.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked(key)
}

// advanceLocked takes key to its next step once every stream has caught
// up with the current one.
func (s *Server) advanceLocked(key string) {
	st := s.staged[key]
	if st == nil {
		return
	}
	sets := s.cache.Served(key)
	if sets == nil {
		s.unstageLocked(key) // the key is gone with its last stream
		return
	}
	need := []string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.SecretType}
	if st.step == 2 {
		need = []string{resourcev3.ListenerType, resourcev3.RouteType}
	}
	versions := map[string]string{}
	for _, typ := range need {
		versions[typ] = sets[typ].Version()
	}
	if !s.tracker.caughtUp(key, versions, s.cache.UpToDate(key)) {
		return
	}
	s.nextStepLocked(key, st)
}

func (s *Server) nextStepLocked(key string, st *staging) {
	s.unstageLocked(key)
	cur := s.cache.Served(key)
	if cur == nil {
		return // the key is gone with its last stream
	}
	if st.step == 1 && cache.Adds(cur[resourcev3.ClusterType], st.target[resourcev3.ClusterType]) {
		st2 := &staging{step: 2, target: st.target}
		st2.timer = time.AfterFunc(s.cfg.StepTimeout, func() { s.stepTimedOut(key, st2) })
		s.staged[key] = st2
		s.stagedKeys.Store(int32(len(s.staged)))
		s.cache.Set(key, s.stepSetsLocked(key, cur, st2))
		s.advanceLocked(key)
		return
	}
	s.cache.Set(key, st.target)
}

// stepTimedOut goes on without the proxies that did not answer in time.
func (s *Server) stepTimedOut(key string, st *staging) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.staged[key] != st {
		return // already advanced or replaced
	}
	s.metrics.stagingTimeouts.Inc()
	s.log.Warn().Str("node_cluster", key).Int("step", st.step).Dur("waited", s.cfg.StepTimeout).
		Msg("proxies did not acknowledge new clusters or routes in time; going on without them")
	s.nextStepLocked(key, st)
}

// expectEndpoints sets (names nil: clears) the endpoints every stream of
// key taking EDS must be sent before a step goes on. A version ACKed is
// not enough: a SotW EDS response carries only what changed, so a stream
// can ACK the current version from a response that had some other
// cluster's endpoints, in the very request that subscribes to the new
// ones.
func (t *tracker) expectEndpoints(key string, names []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(names) > 0 {
		// What streams got so far still counts: a newer target in the
		// same step may add names, not make those sent unsent.
		set := make(map[string]bool, len(names))
		for _, n := range names {
			set[n] = true
		}
		t.expect[key] = &expectation{names: set}
		return
	}
	delete(t.expect, key)
	for _, st := range t.streams {
		if st.node != nil && cache.Key(st.node) == key {
			if ts := st.types.get(resourcev3.EndpointType); ts != nil {
				ts.got = nil
			}
		}
	}
}

// caughtUp reports whether every stream of key has answered (ACK or NACK)
// a response of each of the types in versions at that version, and was
// sent the endpoints expectEndpoints names. A stream that never asked for
// a type is not waited for.
func (t *tracker) caughtUp(key string, versions map[string]string, upToDate map[cache.Filed]bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.expect[key]
	for sk, st := range t.streams {
		if st.node == nil || cache.Key(st.node) != key {
			continue
		}
		// A stream that rejected the clusters will not ask for their
		// endpoints: do not wait for those.
		cds := st.types.get(resourcev3.ClusterType)
		rejectedClusters := cds != nil && cds.sentNonce != "" && cds.nacked
		for _, typ := range slices.Sorted(maps.Keys(versions)) {
			ts := st.types.get(typ)
			if ts == nil || typ == resourcev3.EndpointType && rejectedClusters {
				continue
			}
			answered := ts.answered()
			// Sent nothing of this version because it lacks nothing: its
			// request is answered and its watch waits, up to date.
			current := answered && upToDate[cache.Filed{Order: uint64(sk.id), Delta: sk.delta, Type: typ}]
			if !current && (ts.sentVersion != versions[typ] || !answered) {
				return false
			}
			if typ == resourcev3.EndpointType && e != nil {
				for n := range e.names {
					if !ts.got[n] {
						return false
					}
				}
			}
		}
	}
	return true
}

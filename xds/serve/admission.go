package serve

import (
	"context"
	"slices"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// Admission control for initial syncs.
//
// A proxy's first sync is the expensive part of its life: every cluster,
// endpoint, listener and route at once, where later updates are one
// resource. When thousands of proxies connect together (a bridge restart,
// a network blip, a fleet rollout), answering them all at once queues
// every first response in gRPC's send buffers together: memory grows with
// N times the full state, flow control stretches every sync, and the last
// proxies wait minutes or time out. Instead, at most `limit` streams sync
// at once; the others wait, unanswered, before their first request is
// served, and go as soon as a slot frees. The slot is taken at a stream's
// first request, not when it opens: streams that send nothing hold none.
// Throughput is the same, memory is bounded by limit times the full state,
// and each proxy's wait is short and ordered by arrival.
//
// A stream holds its slot until its state is complete: every type it has
// subscribed to answered and acknowledged (or rejected), clusters among
// them, and the endpoints of those clusters too. Envoy asks for clusters,
// then their endpoints, then listeners and routes; an Envoy with static
// listeners (cds_config over ADS only) never asks for listeners and is
// done with its endpoints; gRPC asks for listeners and routes first and
// clusters and endpoints last. Listeners and routes an Envoy asks for
// after its endpoints are small next to them. A stream that closes frees
// its slot; one that never completes (a stuck client) frees it after
// admissionHold.

// admissionHold bounds how long one stream may hold a slot.
const admissionHold = 20 * time.Second

type admission struct {
	slots chan struct{} // nil: unlimited
	m     *metrics
	hold  time.Duration // admissionHold; tests shorten it
	// held is the streams that hold a slot, each until its hold ends
	// (one timer for all: endTimes).
	held *endTimes[streamKey]
}

func newAdmission(limit int, m *metrics) *admission {
	a := &admission{m: m, hold: admissionHold}
	a.held = newEndTimes(a.free)
	if limit > 0 {
		a.slots = make(chan struct{}, limit)
	}
	return a
}

// admit waits for a slot for key; an error means ctx ended first.
func (a *admission) admit(ctx context.Context, key streamKey) error {
	if a.slots == nil {
		return nil
	}
	select {
	case a.slots <- struct{}{}:
	default:
		a.m.admissionWaiting.Inc()
		defer a.m.admissionWaiting.Dec()
		select {
		case a.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	a.held.add(key, a.hold)
	a.m.admissionSyncing.Inc()
	return nil
}

// holds reports whether key holds a slot.
func (a *admission) holds(key streamKey) bool { return a.held.has(key) }

// release frees key's slot, if it holds one.
func (a *admission) release(key streamKey) {
	if a.held.remove(key) {
		a.free(key)
	}
}

// free gives back a slot key held (released, or its hold ended).
func (a *admission) free(streamKey) {
	<-a.slots
	a.m.admissionSyncing.Dec()
}

// initialSyncDone reports whether a stream's state is complete (see
// above): on an ADS stream, every subscribed type answered, clusters
// answered, and endpoints answered if clusters were sent; on a per-type
// stream, its type answered.
func (t *tracker) initialSyncDone(key streamKey) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.streams[key]
	if st == nil {
		return false
	}
	answered := func(ts *typeState) bool {
		return ts != nil && ts.sentNonce != "" && ts.answered()
	}
	for i := range st.types {
		// Types the bridge does not serve are never answered.
		if ts := &st.types[i]; slices.Contains(cache.TypeOrder, ts.url) && !answered(ts) {
			return false // subscribed, not answered yet or not acknowledged
		}
	}
	if st.typeURL != "" {
		return answered(st.types.get(st.typeURL))
	}
	cds := st.types.get(resourcev3.ClusterType)
	return answered(cds) && (cds.sentResources == 0 || answered(st.types.get(resourcev3.EndpointType)))
}

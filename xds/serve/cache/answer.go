package cache

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// What a watch is answered: the resources a stream lacks, found by
// comparing what it holds (its subscription's returned versions) with a
// set.

// SetMark is the name under which an answer records, among the versions a
// stream holds (its subscription's returned resources), the set it brought
// the stream up to date with. The stream's server makes the map an answer
// returns what the stream holds (package serve's adsStream.deliver), so a
// request that leaves the subscription as it was can be checked against
// the names that changed since the set before (or none), instead of every
// name the stream follows: that
// full comparison, once per proxy per change, was the largest cost of a
// push after the transport. No resource name starts with NUL; a name
// that does is never compared, sent or removed.
const SetMark = "\x00set"

func setMarkOf(id uint64) string { return SetMark + strconv.FormatUint(id, 36) }

// Marked is whether a name is the bridge's own (starts with NUL, as the
// mark does): never compared, sent or removed.
func Marked(name string) bool { return strings.HasPrefix(name, "\x00") }

// ClientName is whether a client may put name among what a stream holds:
// in the versions it says it holds, or by unsubscribing a wildcard
// stream's name (which go-control-plane records as held at version "").
// Not a name with a NUL in it: one that starts with a NUL is the
// bridge's own (a mark), and a forged mark would skip the stream's own
// updates or pass for a map streams share (held.go). Subscribing such a
// name is harmless: it is never compared, sent or removed.
func ClientName(name string) bool { return strings.IndexByte(name, 0) < 0 }

// ClientNames is names without those a client may not use.
func ClientNames(names []string) []string {
	refused := func(n string) bool { return !ClientName(n) }
	if !slices.ContainsFunc(names, refused) {
		return names
	}
	return slices.DeleteFunc(slices.Clone(names), refused)
}

// ClientVersions is what a delta client's initial_resource_versions may
// say it holds: only names it may put there (ClientName).
func ClientVersions(v map[string]string) map[string]string {
	for name := range v {
		if !ClientName(name) {
			v = maps.Clone(v)
			maps.DeleteFunc(v, func(name, _ string) bool { return !ClientName(name) })
			return v
		}
	}
	return v
}

// markOrNone is ts's mark, "" for no set.
func (ts *Set) markOrNone() string {
	if ts == nil {
		return ""
	}
	return ts.mark
}

// heldMark is the mark of the set a delta stream was last brought up to
// date with, when its request leaves the subscription unchanged; ""
// otherwise (a new stream, a type's first request, names subscribed or
// unsubscribed). A client cannot set it: the versions a reconnecting
// client says it holds lose any name with a NUL (ClientVersions).
func heldMark(req *cachev3.DeltaRequest, sub cachev3.Subscription) string {
	if req.GetResponseNonce() == "" || len(req.GetResourceNamesSubscribe()) > 0 ||
		len(req.GetResourceNamesUnsubscribe()) > 0 || len(req.GetInitialResourceVersions()) > 0 {
		return ""
	}
	return sub.ReturnedResources()[SetMark]
}

// changes compares what a stream holds with ts: the entries it lacks or
// holds at another version, and the names it holds that ts no longer has
// (among those it wants). seen is the mark of the set the stream was last
// found up to date with ("" if unknown): ts itself means nothing changed,
// ts's predecessor that only the names that changed since need a look.
func changes(sub cachev3.Subscription, ts *Set, seen string) (changed []*Entry, removed []string) {
	if seen != "" && seen == ts.mark {
		return nil, nil
	}
	known := sub.ReturnedResources()
	wild := sub.IsWildcard()
	subscribed := sub.SubscribedResources()
	// compare looks at one wanted name and its entry (nil: ts lacks it).
	compare := func(name string, e *Entry) {
		v, isKnown := known[name]
		switch {
		case e == nil && isKnown:
			removed = append(removed, name)
		case e != nil && (!isKnown || v != e.version):
			changed = append(changed, e)
		}
	}
	if seen != "" && seen == ts.prevMark {
		for _, name := range ts.diff {
			if _, wanted := subscribed[name]; !Marked(name) && (wild || wanted) {
				compare(name, ts.entries[name])
			}
		}
		return changed, removed
	}
	if !wild {
		for name := range subscribed {
			if !Marked(name) {
				compare(name, ts.entries[name])
			}
		}
		return changed, removed
	}
	for name, e := range ts.entries {
		if !Marked(name) {
			compare(name, e)
		}
	}
	for name := range known {
		if _, ok := ts.entries[name]; !ok && !Marked(name) {
			removed = append(removed, name)
		}
	}
	return changed, removed
}

// sotwAnswer is the response a SotW watch gets from ts, nil if none.
//
// Both kinds of answer leave the mark of ts among the versions they
// return; for SotW it survives only on the bridge's own server, which
// keeps a subscription as it is when a request names the same resources
// (rebuilding it, as go-control-plane's did, drops the mark).
func sotwAnswer(req asked, sub cachev3.Subscription, ts *Set, seen string, own bool) cachev3.Response {
	if ts == nil {
		return nil
	}
	changed, removed := changes(sub, ts, seen)
	// The first request of a type on a stream is always answered, so a
	// client learns that a type is empty.
	first := req.first
	full := cachev3.ResourceRequiresFullStateInSotw(ts.typeURL)
	switch {
	case full && (first || len(changed) > 0 || len(removed) > 0):
		// Everything the stream wants, changed or not.
		send := ts.order
		if !sub.IsWildcard() {
			subscribed := sub.SubscribedResources()
			send = slices.DeleteFunc(slices.Clone(ts.order), func(e *Entry) bool {
				_, ok := subscribed[e.name]
				return !ok
			})
		}
		key := shareKey{names: "\x00all"}
		if !sub.IsWildcard() {
			key.names = namesKey(send, nil)
		}
		returned := ts.fullHeldFor(send, key.names, own)
		return newSotwResponse(req, ts, key, send, returned)
	case !full && (first || len(changed) > 0):
		// Only what changed: absent names keep what the client has. A
		// removed name cannot be said in SotW; a client drops it when it
		// stops referring to it.
		slices.SortFunc(changed, byName)
		slices.Sort(removed)
		sent := namesKey(changed, nil)
		held := sent
		if len(removed) > 0 {
			held = namesKey(changed, removed)
		}
		returned := ts.heldAfter(sub.ReturnedResources(), changed, removed, held, own)
		return newSotwResponse(req, ts, shareKey{names: sent}, changed, returned)
	}
	return nil
}

// deltaAnswer is the response a delta watch gets from ts, nil if none.
func deltaAnswer(req asked, sub cachev3.Subscription, ts *Set, seen string, own bool) cachev3.DeltaResponse {
	if ts == nil {
		return nil
	}
	changed, removed := changes(sub, ts, seen)
	// A wildcard subscription's first request is answered even when
	// empty: Envoy waits for it to finish initialising.
	first := sub.IsWildcard() && req.first
	if !first && len(changed) == 0 && len(removed) == 0 {
		return nil
	}
	slices.SortFunc(changed, byName)
	slices.Sort(removed)
	names := namesKey(changed, removed)
	returned := ts.heldAfter(sub.ReturnedResources(), changed, removed, names, own)
	r := &DeltaResponse{asked: req, version: ts.version, typeURL: ts.typeURL, entries: changed, removed: removed, returned: returned}
	build := func() any { return newSharedDelta(ts.version, ts.typeURL, changed) }
	if sh, ok := ts.sharedFor(shareKey{delta: true, names: names}, changed, build).(*sharedDelta); ok {
		r.shared = sh
	}
	return r
}

func byName(a, b *Entry) int { return strings.Compare(a.name, b.name) }

package cache

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// A stream's watch of one type is a standing object: made once, when the
// type's first request comes (NewSotwWatch, NewDeltaWatch), filed by
// each request of the type (File), and cancelled before the next one and
// when the stream ends (Cancel). Making a watch, its answer's callback
// and its cancel for every request, as go-control-plane's cache
// interface does (CreateWatch), cost three allocations per proxy per
// change, and what a stream kept of them (~0.6 KiB over its four types)
// lay in the heap among the garbage of the requests before it
// (bench/README.md, "What a storm leaves").
//
// A watch's order is its stream's (streams are numbered as they open):
// set answers a key's watches in that order, so the streams handed an
// update reach their proxies in the same order every time and each
// proxy's pushes are as far apart as the builds (at most one per
// debounce window, however long the fan-out takes). In map order, a
// proxy last in one fan-out and first in the next got two pushes within
// a fraction of a window.

// watchBase is what a watch of either kind holds.
type watchBase struct {
	c     *Cache
	order uint64
	asked asked
	sub   cachev3.Subscription
	seen  string // the mark of the set this watch was last found up to date with
	// own: the bridge's servers, which let answers edit the versions a
	// stream holds in place (answer.go).
	own bool
}

// SotwWatch is a SotW stream's standing watch of one type.
type SotwWatch struct {
	watchBase
	filed filing[*SotwWatch]
	to    SotwSink     // as DeltaWatch.to
	ours  Subscription // as DeltaWatch.ours
}

// DeltaWatch is a delta stream's standing watch of one type.
type DeltaWatch struct {
	watchBase
	filed filing[*DeltaWatch]
	// to takes the watch's answers, under the cache's lock: it must not
	// block (serve's adsStream.deliver queues them).
	to DeltaSink
	// ours is the watch's subscription when it was made with one
	// (NewDeltaWatchOf): one object for the two, where a subscription
	// apart was a 24-byte object per type of every stream, kept among a
	// connect's garbage of that size (bench/README.md, "Where a storm's
	// memory stays").
	ours Subscription
}

// DeltaSink takes a delta watch's answers with the watch's subscription.
// A stream is one for all its watches: a function per watch, closing over
// the stream and the subscription, was a small object kept for every type
// of every stream (bench/README.md, "Where a storm's memory stays").
type DeltaSink interface {
	TakeDelta(sub cachev3.Subscription, r cachev3.DeltaResponse)
}

// SotwSink is DeltaSink for SotW.
type SotwSink interface {
	TakeSotw(sub cachev3.Subscription, r cachev3.Response)
}

// DeltaFunc is a DeltaSink that has no use for the subscription.
type DeltaFunc func(cachev3.DeltaResponse)

func (f DeltaFunc) TakeDelta(_ cachev3.Subscription, r cachev3.DeltaResponse) { f(r) }

// SotwFunc is DeltaFunc for SotW.
type SotwFunc func(cachev3.Response)

func (f SotwFunc) TakeSotw(_ cachev3.Subscription, r cachev3.Response) { f(r) }

func (w *DeltaWatch) take(r cachev3.DeltaResponse) { w.to.TakeDelta(w.sub, r) }

func (w *SotwWatch) take(r cachev3.Response) { w.to.TakeSotw(w.sub, r) }

// filing is where a watch waits, if it does: its key's watches of its
// type. Written under the cache's lock.
type filing[W comparable] struct {
	in  map[string]map[W]struct{} // nil: not filed
	typ string
}

func (f *filing[W]) file(in map[string]map[W]struct{}, typ string, w W) {
	if in[typ] == nil {
		in[typ] = map[W]struct{}{}
	}
	in[typ][w] = struct{}{}
	f.in, f.typ = in, typ
}

func (f *filing[W]) unfile(w W) {
	if f.in == nil {
		return
	}
	delete(f.in[f.typ], w)
	if len(f.in[f.typ]) == 0 {
		delete(f.in, f.typ) // a made-up type URL leaves nothing behind
	}
	f.in = nil
}

// NewSotwWatch is the bridge's SotW server's watch of one type for the
// stream numbered order, with the stream's subscription of the type; to
// takes the answers.
func (c *Cache) NewSotwWatch(order uint64, sub cachev3.Subscription, to SotwSink) *SotwWatch {
	return &SotwWatch{watchBase: watchBase{c: c, order: order, sub: sub, own: true}, to: to}
}

// NewSotwWatchOf is NewSotwWatch with a subscription of its own, made
// as NewSotwSubscription(names) makes one (Subscription returns it).
func (c *Cache) NewSotwWatchOf(order uint64, names []string, to SotwSink) *SotwWatch {
	w := &SotwWatch{watchBase: watchBase{c: c, order: order, own: true}, to: to}
	w.ours.initSotw(names)
	w.sub = &w.ours
	return w
}

// Subscription is the watch's own subscription (NewSotwWatchOf's).
func (w *SotwWatch) Subscription() *Subscription { return &w.ours }

// NewDeltaWatchOf is NewSotwWatchOf for delta: its subscription is made
// as NewDeltaSubscription(subscribe, unsubscribe, held) makes one.
func (c *Cache) NewDeltaWatchOf(order uint64, subscribe, unsubscribe []string, held map[string]string, to DeltaSink) *DeltaWatch {
	w := &DeltaWatch{watchBase: watchBase{c: c, order: order, own: true}, to: to}
	w.ours.initDelta(subscribe, unsubscribe, held)
	w.sub = &w.ours
	return w
}

// Subscription is the watch's own subscription (NewDeltaWatchOf's).
func (w *DeltaWatch) Subscription() *Subscription { return &w.ours }

// NewDeltaWatch is NewSotwWatch for delta.
func (c *Cache) NewDeltaWatch(order uint64, sub cachev3.Subscription, to DeltaSink) *DeltaWatch {
	return &DeltaWatch{watchBase: watchBase{c: c, order: order, sub: sub, own: true}, to: to}
}

// File answers req at once if the stream lacks something, or files the
// watch for set to answer. The watch must not be filed (Cancel first).
// sameNames says the request names what the previous one of its type
// did, so the versions the stream holds are what the last answer left
// (see heldMark).
func (w *SotwWatch) File(req *cachev3.Request, sameNames bool) {
	held := ""
	if sameNames && req.GetResponseNonce() != "" {
		held = w.sub.ReturnedResources()[SetMark]
	}
	w.file(req, held)
}

func (w *SotwWatch) file(req *cachev3.Request, held string) {
	fileOrAnswer(&w.watchBase, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), held, sotwAnswer, w,
		func(k *keyState) { w.filed.file(k.sotw, req.GetTypeUrl(), w) })
}

// fileOrAnswer is File for either kind: the answer to the key's set of
// the type (answer's, none if it is R's zero) goes out at once through
// send, or file files the watch.
func fileOrAnswer[R comparable](w *watchBase, node *corev3.Node, typ, nonce, held string,
	answer func(asked, cachev3.Subscription, *Set, string, bool) R, to interface{ take(R) }, file func(*keyState)) {
	if w.c.cfg.Watched != nil {
		w.c.cfg.Watched(node, typ, w.sub, held == "")
	}
	w.asked = askedBy(node, nonce)
	w.c.open(node, typ, held != "", func(ts *Set, fan *fanout) bool {
		var none R
		resp := answer(w.asked, w.sub, ts, held, w.own)
		if resp == none {
			return false
		}
		fan.attach(resp, true)
		to.take(resp)
		return true
	}, func(k *keyState, seen string) {
		w.seen = seen
		file(k)
	})
}

// Cancel takes the watch out of its key's, if it waits there.
func (w *SotwWatch) Cancel() {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.filed.unfile(w)
}

// File is SotwWatch.File for delta: which versions the stream holds is
// the subscription's, and whether they are what the last answer left,
// the request's (heldMark).
func (w *DeltaWatch) File(req *cachev3.DeltaRequest) {
	fileOrAnswer(&w.watchBase, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), heldMark(req, w.sub), deltaAnswer, w,
		func(k *keyState) { w.filed.file(k.delta, req.GetTypeUrl(), w) })
}

// Cancel is SotwWatch.Cancel for delta.
func (w *DeltaWatch) Cancel() {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.filed.unfile(w)
}

// CreateWatch is go-control-plane's SotW watch, kept for the
// cachev3.Cache interface and the tests that drive the cache the way
// go-control-plane's SotW server did (answers copy the held versions);
// the bridge's own SotW server (serve's sotw.go) keeps a SotwWatch.
func (c *Cache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, ch chan cachev3.Response) (func(), error) {
	w := &SotwWatch{watchBase: watchBase{c: c, sub: sub}, to: SotwFunc(func(r cachev3.Response) { ch <- r; HandedOver(r) })}
	w.file(req, "")
	return w.Cancel, nil
}

// OpenSotw files a watch of its own for one request (tests): a
// SotwWatch filed once.
func (c *Cache) OpenSotw(order uint64, req *cachev3.Request, sub cachev3.Subscription, sameNames bool, send func(cachev3.Response)) func() {
	w := c.NewSotwWatch(order, sub, SotwFunc(send))
	w.File(req, sameNames)
	return w.Cancel
}

// CreateDeltaWatch is go-control-plane's delta watch, kept likewise; the
// bridge's own delta server (serve's delta.go) keeps a DeltaWatch.
func (c *Cache) CreateDeltaWatch(req *cachev3.DeltaRequest, sub cachev3.Subscription, ch chan cachev3.DeltaResponse) (func(), error) {
	w := &DeltaWatch{watchBase: watchBase{c: c, sub: sub}, to: DeltaFunc(func(r cachev3.DeltaResponse) { ch <- r; HandedOver(r) })}
	w.File(req)
	return w.Cancel, nil
}

// OpenDelta is OpenSotw for delta.
func (c *Cache) OpenDelta(order uint64, req *cachev3.DeltaRequest, sub cachev3.Subscription, send func(cachev3.DeltaResponse)) func() {
	w := c.NewDeltaWatch(order, sub, DeltaFunc(send))
	w.File(req)
	return w.Cancel
}

package serve

import (
	"context"
	"slices"
	"strconv"
	"sync"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"google.golang.org/protobuf/proto"
)

// The bridge's state-of-the-world xDS server, built like the delta one
// (delta.go): the handler goroutine reads and acts on requests, a
// sending goroutine sends what the cache queued. The protocol is go-control-plane's ordered
// ADS: one subscription per type, legacy wildcard when a type's first
// request names nothing, and a request whose nonce is not the last one
// sent for its type ignored (Envoy's xDS protocol, "resource updates").
//
// One difference, for cost: a request naming the resources the previous
// one of its type did leaves the subscription as it was, so the cache
// compares only what changed since the stream's last answer (package cache's answer.go)
// instead of every name, once per proxy per push.
type sotwServer struct{ adsServer }

type sotwStream struct {
	adsStream[cachev3.Response]
	s   *sotwServer
	str stream.Stream

	// sent is, per type, the nonce of the last response sent since the
	// last request acted on: written by the sender as it sends, read and
	// cleared by the handler (the stale-nonce rule).
	sentMu sync.Mutex
	sent   sentNonces

	typeURL string                       // as deltaStream's
	req     discoveryv3.DiscoveryRequest // as deltaStream's
}

// sentNonces holds a nonce per type: a stream has a handful of types,
// and a map of them was ~0.3 KiB of every SotW proxy's heap. A nonce is
// kept as the number the stream sent (outbox), 0 for none: 24 bytes a
// type, not 32.
type sentNonces []typeNonce

type typeNonce struct {
	typ   string
	nonce int64
}

func (s *sentNonces) set(typ string, nonce int64) {
	for i := range *s {
		if (*s)[i].typ == typ {
			(*s)[i].nonce = nonce
			return
		}
	}
	if *s == nil {
		*s = make(sentNonces, 0, 4) // ADS: four types, one array
	}
	*s = append(*s, typeNonce{typ, nonce})
}

// take forgets typ's nonce.
func (s *sentNonces) take(typ string) {
	for i, tn := range *s {
		if tn.typ == typ {
			*s = slices.Delete(*s, i, i+1)
			return
		}
	}
}

// get is typ's nonce, 0 for none.
func (s sentNonces) get(typ string) int64 {
	for _, tn := range s {
		if tn.typ == typ {
			return tn.nonce
		}
	}
	return 0
}

// isNonce reports whether s is nonce as the stream sent it (decimal).
func isNonce(s string, nonce int64) bool {
	var b [20]byte
	return string(strconv.AppendInt(b[:0], nonce, 10)) == s
}

// sameSlice is whether a and b are the same slice of names.
func sameSlice(a, b []string) bool {
	return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0]
}

func newSotwServer(ctx context.Context, cache *cache.Cache, cb *callbacks) *sotwServer {
	return &sotwServer{adsServer{ender: newStreamEnder(ctx), cache: cache, cb: cb}}
}

func (s *sotwServer) serve(str stream.Stream, defaultTypeURL string) error {
	st := &sotwStream{s: s, str: str, typeURL: defaultTypeURL}
	st.init(s.ids.Add(1))
	s.checkEndable(str.Context())
	return runStreamOps(&st.adsStream, s.ender, str.Context(), streamOps[*discoveryv3.DiscoveryRequest, cachev3.Response](st), s.senders)
}

func (st *sotwStream) streamOpened(ctx context.Context) error {
	return st.s.cb.OnStreamOpen(ctx, st.id, st.typeURL)
}

func (st *sotwStream) streamContext() context.Context { return st.str.Context() }

func (st *sotwStream) streamClosed(node *corev3.Node) { st.s.cb.OnStreamClosed(st.id, node) }

func (st *sotwStream) readRequest() (*discoveryv3.DiscoveryRequest, error) {
	if err := st.str.RecvMsg(&st.req); err != nil {
		return nil, err
	}
	return &st.req, nil
}

// TakeSotw queues an answer of one of the stream's watches
// (cache.SotwSink).
func (st *sotwStream) TakeSotw(sub cachev3.Subscription, r cachev3.Response) {
	st.deliver(sub.(*cache.Subscription), r.GetReturnedResources(), r)
}

// sotwResponses is deltaResponses for SotW.
var sotwResponses = sync.Pool{New: func() any { return new(discoveryv3.DiscoveryResponse) }}

func (st *sotwStream) sendAnswer(r cachev3.Response, nonce int64) error {
	sr, ok := r.(*cache.SotwResponse)
	if !ok {
		resp, err := r.GetDiscoveryResponse()
		if err != nil {
			return err
		}
		return st.sendResponse(r, resp, nonce)
	}
	resp := sotwResponses.Get().(*discoveryv3.DiscoveryResponse)
	defer func() {
		proto.Reset(resp) // keeps nothing of this push
		sotwResponses.Put(resp)
	}()
	sr.Fill(resp)
	return st.sendResponse(r, resp, nonce)
}

func (st *sotwStream) sendResponse(r cachev3.Response, resp *discoveryv3.DiscoveryResponse, nonce int64) error {
	resp.Nonce = strconv.FormatInt(nonce, 10)
	st.sentMu.Lock()
	st.sent.set(resp.GetTypeUrl(), nonce) // the type asked for: responses carry the canonical type
	st.sentMu.Unlock()
	if sr, ok := r.(*cache.SotwResponse); ok {
		// The names are the entries' (no decoding of what the cache built).
		st.s.cb.response(streamKey{id: st.id}, resp.GetTypeUrl(), resp.GetVersionInfo(), resp.GetNonce(), len(resp.GetResources()), 0, sr.Names)
	} else {
		st.s.cb.OnStreamResponse(r.GetContext(), st.id, r.GetRequest(), resp)
	}
	return st.str.Send(resp)
}

// accept applies the stale-nonce rule to a request of typ: only a
// response sent since the last request acted on makes a request stale,
// when the request does not answer it (as go-control-plane's server, where
// a request replaces the watch that held the nonce). An accepted request
// starts the type afresh.
func (st *sotwStream) accept(typ, nonce string) bool {
	st.sentMu.Lock()
	defer st.sentMu.Unlock()
	if last := st.sent.get(typ); last != 0 && !isNonce(nonce, last) {
		return false
	}
	st.sent.take(typ)
	return true
}

// actOn acts on one request, in the handler goroutine.
func (st *sotwStream) actOn(req *discoveryv3.DiscoveryRequest) error {
	if req == nil {
		return errEmptyRequest
	}
	req.Node = st.nodeFor(req.GetNode())
	typ, err := typeFor(req.GetTypeUrl(), st.typeURL)
	if err != nil {
		return err
	}
	req.TypeUrl = typ
	// After the node and type are filled in, as go-control-plane's.
	if err := st.s.cb.OnStreamRequest(st.id, req); err != nil {
		return err
	}
	names := req.GetResourceNames()
	w, old := st.watchFor(typ, func(w *typeWatch) {
		w.sotw = st.s.cache.NewSotwWatchOf(uint64(st.id), names, st)
	})
	// An ACK repeating the names of the type's last request carries that
	// request's slice (package cache's nodememo.go): its digest is the one before.
	digest := w.names
	if !sameSlice(names, w.digested) {
		digest = cache.DigestNames(names)
	}
	same := false
	if old {
		if !st.accept(typ, req.GetResponseNonce()) {
			return nil // stale: an answer to it is already on its way
		}
		w.cancel()
		if same = digest == w.names; !same {
			cache.OwnHeld(w.subscription()) // it drops the names no longer wanted
			w.subscription().SetNames(names)
		}
	}
	w.names, w.digested = digest, names
	w.sotw.File(req, same)
	return nil
}

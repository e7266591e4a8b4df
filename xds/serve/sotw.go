package serve

import (
	"context"
	"errors"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The bridge's state-of-the-world xDS server, built like the delta one
// (delta.go): the reading goroutine acts on requests, the handler only
// sends what the cache queued. The protocol is go-control-plane's ordered
// ADS: one subscription per type, legacy wildcard when a type's first
// request names nothing, and a request whose nonce is not the last one
// sent for its type ignored (Envoy's xDS protocol, "resource updates").
//
// One difference, for cost: a request naming the resources the previous
// one of its type did leaves the subscription as it was, so the cache
// compares only what changed since the stream's last answer (answer.go)
// instead of every name, once per proxy per push.
type sotwServer struct {
	ctx   context.Context
	cache *serveCache
	cb    *callbacks
	ids   atomic.Int64
}

type sotwStream struct {
	s   *sotwServer
	str stream.Stream
	id  int64
	out *outbox[cachev3.Response]

	// sent is, per type, the nonce of the last response sent since the
	// last request acted on: written by the handler as it sends, read and
	// cleared by the reader (the stale-nonce rule).
	sentMu sync.Mutex
	sent   map[string]string

	// As deltaStream's.
	wmu     sync.Mutex
	closed  bool
	node    *corev3.Node
	watches map[string]*sotwTypeWatch
}

type sotwTypeWatch struct {
	sub    *stream.Subscription
	names  namesDigest // of the last request's
	cancel func()
}

// namesDigest identifies a set of resource names in any order, without
// holding them (an edge proxy's request names every cluster): a sum of
// seeded hashes (a client cannot aim at another set without the seed)
// and the count.
type namesDigest struct {
	sum uint64
	n   int
}

var namesSeed = maphash.MakeSeed()

func digestNames(names []string) namesDigest {
	d := namesDigest{n: len(names)}
	for _, n := range names {
		d.sum += maphash.String(namesSeed, n)
	}
	return d
}

func newSotwServer(ctx context.Context, cache *serveCache, cb *callbacks) *sotwServer {
	return &sotwServer{ctx: ctx, cache: cache, cb: cb}
}

func (s *sotwServer) serve(str stream.Stream, defaultTypeURL string) error {
	st := &sotwStream{s: s, str: str, id: s.ids.Add(1), out: newOutbox[cachev3.Response](),
		sent: map[string]string{}, node: &corev3.Node{}, watches: map[string]*sotwTypeWatch{}}
	if err := s.cb.OnStreamOpen(str.Context(), st.id, defaultTypeURL); err != nil {
		return err
	}
	defer st.close()
	recvErr := make(chan error, 1)
	go func() { recvErr <- st.readLoop(defaultTypeURL) }()
	return pump(s.ctx, str.Context(), st.out, recvErr, st.send)
}

func (st *sotwStream) send(r cachev3.Response, nonce int64) error {
	resp, err := r.GetDiscoveryResponse()
	if err != nil {
		return err
	}
	resp.Nonce = strconv.FormatInt(nonce, 10)
	st.sentMu.Lock()
	st.sent[r.GetRequest().GetTypeUrl()] = resp.Nonce
	st.sentMu.Unlock()
	st.s.cb.OnStreamResponse(r.GetContext(), st.id, r.GetRequest(), resp)
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
	if last := st.sent[typ]; last != "" && nonce != last {
		return false
	}
	delete(st.sent, typ)
	return true
}

// deliver: as deltaStream.deliver.
func (st *sotwStream) deliver(sub *stream.Subscription, r cachev3.Response) {
	sub.SetReturnedResources(r.GetReturnedResources())
	st.out.push(r)
}

func (st *sotwStream) readLoop(defaultTypeURL string) error {
	for {
		req, err := st.str.Recv()
		if err != nil {
			return nil
		}
		if err := st.handle(req, defaultTypeURL); err != nil {
			return err
		}
	}
}

func (st *sotwStream) handle(req *discoveryv3.DiscoveryRequest, defaultTypeURL string) error {
	if req == nil {
		return status.Errorf(codes.Unavailable, "empty request")
	}
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if st.closed {
		return errors.New("stream closed")
	}
	if req.GetNode() != nil {
		st.node = req.GetNode()
	} else {
		req.Node = st.node
	}
	if req.GetTypeUrl() == "" {
		if defaultTypeURL == resourcev3.AnyType {
			return status.Errorf(codes.InvalidArgument, "type URL is required for ADS")
		}
		req.TypeUrl = defaultTypeURL
	}
	if err := st.s.cb.OnStreamRequest(st.id, req); err != nil {
		return err
	}
	typ := req.GetTypeUrl()
	names := req.GetResourceNames()
	digest := digestNames(names)
	w := st.watches[typ]
	same := false
	if w == nil {
		sub := stream.NewSotwSubscription(names, true)
		w = &sotwTypeWatch{sub: &sub}
		st.watches[typ] = w
	} else {
		if !st.accept(typ, req.GetResponseNonce()) {
			return nil // stale: an answer to it is already on its way
		}
		w.cancel()
		if same = digest == w.names; !same {
			w.sub.SetResourceSubscription(names)
		}
	}
	w.names = digest
	sub := w.sub
	w.cancel = st.s.cache.openSotw(uint64(st.id), req, sub, same, func(r cachev3.Response) { st.deliver(sub, r) })
	return nil
}

func (st *sotwStream) close() {
	st.wmu.Lock()
	st.closed = true
	for _, w := range st.watches {
		if w.cancel != nil {
			w.cancel()
		}
	}
	node := st.node
	st.wmu.Unlock()
	st.out.drop()
	st.s.cb.OnStreamClosed(st.id, node)
}

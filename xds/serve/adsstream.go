package serve

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve/cache"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// adsServer is what the bridge's two servers (delta.go, sotw.go) hold.
type adsServer struct {
	// ender ends the streams when the server's context ends.
	ender *streamEnder
	cache *cache.Cache
	cb    *callbacks
	ids   atomic.Int64
	// endable checks the first stream only: every stream is of gRPC's
	// one transport type.
	endable sync.Once
	// senders sends the updates' answers (sendpool.go); nil: a goroutine
	// per sending turn.
	senders *sendPool
}

// checkEndable warns when gRPC's streams cannot be ended from outside
// their handler (endStream): a gRPC release without the transport
// stream's WriteStatus would make a shutdown wait out its grace and a
// sidecar's re-keying never close its stream. The tests that end streams
// so (TestShutdownEndsStreamsWithOK, the sidecar ones) fail first.
func (a *adsServer) checkEndable(ctx context.Context) {
	a.endable.Do(func() {
		if _, ok := grpc.ServerTransportStreamFromContext(ctx).(statusWriter); !ok {
			a.cb.log.Error().Msg("this gRPC's server streams cannot be ended from outside their handler; shutdown will wait for its grace period and sidecar re-keying will not close streams")
		}
	})
}

// adsStream is what a stream of either of the bridge's servers (delta.go,
// sotw.go) holds: the answers queued for it, and its watches and node,
// which are the handler goroutine's (it reads, acts on requests and
// closes the stream). Lock order: the cache's lock, then the outbox's.
//
// A stream's server embeds it, and it its outbox: one allocation for the
// three (each proxy's at-rest memory counts its allocations as well as
// their bytes: bench/README.md, "What a storm leaves").
type adsStream[R any] struct {
	id   int64
	out  outbox[R]
	node *corev3.Node
	// watches holds a typeWatch per type, in the order the types came:
	// a stream has a handful, and values searched in turn are smaller
	// than a map of pointers (~0.3 KiB of every proxy's heap). A
	// pointer watchFor returns is good until it adds a type.
	watches []typeWatch
}

// typeWatch is a stream's standing watch of one type in the cache (one
// of delta and sotw), which holds its subscription and which each request
// files again.
type typeWatch struct {
	typ   string
	delta *cache.DeltaWatch
	sotw  *cache.SotwWatch
	names cache.NamesDigest // SotW: the names of the type's last request
	// digested is the slice names was computed from (SotW).
	digested []string
}

// subscription is the type's subscription (its watch's).
func (w *typeWatch) subscription() *cache.Subscription {
	if w.delta != nil {
		return w.delta.Subscription()
	}
	return w.sotw.Subscription()
}

// cancel takes the type's watch out of the cache, if it waits there.
func (w *typeWatch) cancel() {
	switch {
	case w.delta != nil:
		w.delta.Cancel()
	case w.sotw != nil:
		w.sotw.Cancel()
	}
}

// init readies a stream numbered id, in place.
func (a *adsStream[R]) init(id int64) {
	a.id = id
	a.out.init()
}

// watchFor is the stream's watch of typ, which made makes (the watch and
// its subscription) when the type has none yet (old false).
func (a *adsStream[R]) watchFor(typ string, made func(w *typeWatch)) (w *typeWatch, old bool) {
	for i := range a.watches {
		if a.watches[i].typ == typ {
			return &a.watches[i], true
		}
	}
	if a.watches == nil {
		a.watches = make([]typeWatch, 0, 4) // ADS: CDS, EDS, LDS, RDS
	}
	a.watches = append(a.watches, typeWatch{typ: typ})
	w = &a.watches[len(a.watches)-1]
	made(w)
	return w, false
}

// deliver queues an answer for the sending goroutine. It runs under the
// cache's lock (an answer is computed and handed over atomically with
// its watch's removal). The versions the stream holds become the
// answer's (held) here, not when it is sent: the next request of the type
// is compared with what the stream will hold, and the answers of a stream
// go out in the order they were made.
func (a *adsStream[R]) deliver(sub *cache.Subscription, held map[string]string, r R) {
	sub.SetReturnedResources(held)
	a.out.push(r)
}

// streamOps is what runStreamOps does with a stream, one method a step;
// the servers' streams (deltaStream, sotwStream) are their own. A
// function a step, each closing over the stream, was five small objects
// kept for every stream's life (bench/README.md, "Where a storm's memory
// stays").
type streamOps[Req, R any] interface {
	streamOpened(ctx context.Context) error // the open callback
	streamClosed(node *corev3.Node)         // the closed callback
	readRequest() (Req, error)
	actOn(req Req) error
	answerSender[R]
}

// answerSender sends a stream's answers (the outbox's sender).
type answerSender[R any] interface {
	sendAnswer(r R, nonce int64) error
	// streamContext is the stream's, which a failed send ends (endStream).
	streamContext() context.Context
}

// runStreamOps serves one stream in the handler's goroutine: it reads
// requests and acts on each with ops.actOn (while the stream's queue has
// room: outbox.waitRoom), while the answers the cache queues go out from
// a sending goroutine that runs only while there is something to send
// (outbox). The stream ends when a read fails (the client ended it: nil,
// as go-control-plane; an interceptor refused the request: that status,
// readEnd), when acting fails (its status), or when a send fails (gRPC has
// then ended the stream with the send's status, and the read fails).
//
// ctx is the stream's context (it ends with the stream). When the
// server ends, ender ends the stream with OK (endStream), which wakes a
// handler blocked in a read, as go-control-plane's servers return nil
// then.
//
// ops.streamOpened and ops.streamClosed are the stream's callbacks: the
// first gets ctx; the second runs after every watch is cancelled, with
// the stream's node.
func runStreamOps[Req, R any](a *adsStream[R], ender *streamEnder, ctx context.Context, ops streamOps[Req, R], senders *sendPool) error {
	ender.add(a.id, ctx)
	defer ender.remove(a.id)
	if err := ops.streamOpened(ctx); err != nil {
		return err
	}
	defer func() { ops.streamClosed(a.close()) }()
	a.out.startSender(ops, senders)
	var err error
	for a.out.waitRoom(ctx) {
		var req Req
		if req, err = ops.readRequest(); err != nil {
			err = readEnd(err)
			break
		}
		if err = ops.actOn(req); err != nil {
			break
		}
	}
	if err != nil {
		// The status goes out now, and a send blocked by a client that
		// does not read wakes (it would hold stop until the client read).
		endStream(ctx, status.Convert(err))
	}
	// A send that failed ended the stream first: its status is the one
	// the client got.
	if serr := a.out.stop(); serr != nil {
		return serr
	}
	return err
}

// readEnd is how a failed read ends the stream: the client closing its
// side or going away ends it as go-control-plane's servers did (nil);
// any other error is the stream's status, such as authorization's
// refusal of a node that changed within the stream (authz.go), which an
// interceptor returns from the read.
func readEnd(err error) error {
	if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// errEmptyRequest ends a stream whose read gave no request.
var errEmptyRequest = status.Error(codes.Unavailable, "empty request")

// nodeFor is the stream's node: n when a request carries one (it may
// come only with the first), the one before otherwise.
//
// A stream's first request carries its node (firstRequestInterceptor), so
// the empty node go-control-plane's servers start from is made only for
// a stream without one: made for every stream, it was dropped at once,
// among the connect's garbage in the size class the streams' nodes keep.
func (a *adsStream[R]) nodeFor(n *corev3.Node) *corev3.Node {
	if n != nil {
		a.node = n
	} else if a.node == nil {
		a.node = &corev3.Node{}
	}
	return a.node
}

// typeFor is a request's type: its own, or the service's on a per-type
// stream; ADS requests must name one.
func typeFor(typeURL, defaultTypeURL string) (string, error) {
	switch {
	case typeURL != "":
		return canonicalType(typeURL), nil
	case defaultTypeURL == resourcev3.AnyType:
		return "", status.Errorf(codes.InvalidArgument, "type URL is required for ADS")
	}
	return defaultTypeURL, nil
}

// close cancels every watch and drops what was not sent. The handler
// goroutine calls it last, so no request is acted on after it. It
// returns the node, for the closed callback.
func (a *adsStream[R]) close() *corev3.Node {
	for i := range a.watches {
		a.watches[i].cancel()
	}
	a.out.drop()
	if a.node == nil {
		return &corev3.Node{} // the closed callback gets a node, as before
	}
	return a.node
}

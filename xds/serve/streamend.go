package serve

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// statusWriter is what gRPC's transport stream (the ServerTransportStream
// in a handler's context) does to end a stream: it writes the status and
// trailers, and ends the stream's context, which wakes a read blocked on
// it, as when the handler returns that status.
type statusWriter interface {
	WriteStatus(*status.Status) error
}

// endStream ends the gRPC stream of ctx with st from outside its handler,
// which spends its idle life blocked in a read (runStream): the client
// gets st, and the read fails, so the handler returns (its own status is
// then not sent). It reports whether ctx is a gRPC stream's that can be
// ended so.
//
// Why not end a context of our own: gRPC wakes a read only when the
// stream's context ends, and a read woken that way writes Canceled as the
// stream's status before the handler can return one (grpc's
// serverStream.RecvMsg), so a shutdown would read as Canceled and a
// sidecar's re-keying would lose its Unavailable and its reason.
func endStream(ctx context.Context, st *status.Status) bool {
	w, ok := grpc.ServerTransportStreamFromContext(ctx).(statusWriter)
	if ok {
		_ = w.WriteStatus(st) // fails only when the stream has ended already
	}
	return ok
}

// EndStream ends the gRPC stream of ctx (a handler's or an interceptor's
// stream context) with err's status from outside its handler, as
// endStream; for ServerConfig.StreamInterceptor.
func EndStream(ctx context.Context, err error) bool {
	return endStream(ctx, status.Convert(err))
}

// streamEnder ends every stream it holds with OK when its server's
// context ends (as go-control-plane's servers return nil then): one hook
// on the server's context, where a hook per stream (context.AfterFunc)
// was three allocations held for each stream's life, ~0.2 KiB of every
// proxy's heap. A stream added after the end is ended at once.
type streamEnder struct {
	mu    sync.Mutex
	ended bool
	ctxs  map[int64]context.Context
}

func newStreamEnder(server context.Context) *streamEnder {
	e := &streamEnder{ctxs: map[int64]context.Context{}}
	context.AfterFunc(server, e.endAll)
	return e
}

// add holds stream id's context until remove.
func (e *streamEnder) add(id int64, ctx context.Context) {
	e.mu.Lock()
	if !e.ended {
		e.ctxs[id] = ctx
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	endStream(ctx, status.New(codes.OK, ""))
}

func (e *streamEnder) remove(id int64) {
	e.mu.Lock()
	delete(e.ctxs, id)
	e.mu.Unlock()
}

func (e *streamEnder) endAll() {
	e.mu.Lock()
	e.ended = true
	ctxs := e.ctxs
	e.ctxs = nil
	e.mu.Unlock()
	for _, ctx := range ctxs {
		endStream(ctx, status.New(codes.OK, ""))
	}
}

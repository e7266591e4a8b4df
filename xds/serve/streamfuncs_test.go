package serve

import (
	"context"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// Functions as a stream's steps, for tests that drive streams and
// outboxes without a server's stream (runStreamOps, startSender).

// runStream is runStreamOps with a function per step.
func runStream[Req, R any](a *adsStream[R], ender *streamEnder, ctx context.Context,
	open func(context.Context) error, closed func(*corev3.Node),
	recv func() (Req, error), handle func(Req) error, send func(R, int64) error, senders *sendPool) error {
	return runStreamOps(a, ender, ctx, funcOps[Req, R]{open, closed, recv, handle, send, ctx}, senders)
}

// funcOps is streamOps of functions.
type funcOps[Req, R any] struct {
	open   func(context.Context) error
	closed func(*corev3.Node)
	recv   func() (Req, error)
	handle func(Req) error
	send   sendFunc[R]
	ctx    context.Context
}

func (f funcOps[Req, R]) streamOpened(ctx context.Context) error { return f.open(ctx) }
func (f funcOps[Req, R]) streamClosed(n *corev3.Node)            { f.closed(n) }
func (f funcOps[Req, R]) readRequest() (Req, error)              { return f.recv() }
func (f funcOps[Req, R]) actOn(req Req) error                    { return f.handle(req) }
func (f funcOps[Req, R]) sendAnswer(r R, nonce int64) error      { return f.send(r, nonce) }
func (f funcOps[Req, R]) streamContext() context.Context         { return f.ctx }

// sendFunc is a stream's send as a function.
type sendFunc[R any] func(R, int64) error

// funcSender is an answerSender of a function and a context (tests).
type funcSender[R any] struct {
	send sendFunc[R]
	ctx  context.Context
}

func (f funcSender[R]) sendAnswer(r R, nonce int64) error { return f.send(r, nonce) }
func (f funcSender[R]) streamContext() context.Context    { return f.ctx }

// start is startSender with a function and a context as the sender.
func (o *outbox[R]) start(ctx context.Context, send func(r R, nonce int64) error, pool *sendPool) {
	o.startSender(funcSender[R]{send, ctx}, pool)
}

// turnFunc is a send pool's turn that is a function.
type turnFunc func()

func (f turnFunc) runTurn() { f() }

// Go runs turn on a worker (Run).
func (p *sendPool) Go(turn func()) { p.Run(turnFunc(turn)) }

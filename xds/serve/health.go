package serve

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthService is the standard gRPC health service (grpc.health.v1) on
// the xDS port, with one addition: when the server drains, open Watch
// streams are sent NOT_SERVING and then ended, so they do not hold the
// graceful stop for its whole grace period (xDS streams end by themselves
// when Serve's context does).
type healthService struct {
	*health.Server
	drain     chan struct{} // closed when Serve starts draining
	drainOnce sync.Once
}

func newHealthService() *healthService {
	h := &healthService{Server: health.NewServer(), drain: make(chan struct{})}
	for _, svc := range healthServices {
		h.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	return h
}

// setServing marks the server SERVING (ignored once draining).
func (h *healthService) setServing() {
	for _, svc := range healthServices {
		h.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
	}
}

// shutdown reports NOT_SERVING from now on and ends open watches.
func (h *healthService) shutdown() {
	h.Shutdown()
	h.drainOnce.Do(func() { close(h.drain) })
}

func (h *healthService) Watch(in *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	w := &drainingWatch{Health_WatchServer: stream, ctx: ctx, cancel: cancel, drain: h.drain}
	w.last.Store(int32(healthpb.HealthCheckResponse_SERVING))
	go func() {
		select {
		case <-h.drain:
			// NOT_SERVING already sent: nothing more will come.
			if w.last.Load() != int32(healthpb.HealthCheckResponse_SERVING) {
				cancel()
			}
		case <-ctx.Done():
		}
	}()
	return h.Server.Watch(in, w)
}

// drainingWatch ends a watch right after it has told the client it is no
// longer serving, once the server drains.
type drainingWatch struct {
	healthpb.Health_WatchServer
	ctx    context.Context
	cancel context.CancelFunc
	drain  <-chan struct{}
	last   atomic.Int32 // last status sent
}

func (w *drainingWatch) Context() context.Context { return w.ctx }

func (w *drainingWatch) Send(r *healthpb.HealthCheckResponse) error {
	err := w.Health_WatchServer.Send(r)
	w.last.Store(int32(r.GetStatus()))
	select {
	case <-w.drain:
		if r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			w.cancel()
		}
	default:
	}
	return err
}

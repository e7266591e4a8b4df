package serve

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestStreamThatDoesNotReadHoldsBackItsRequests: while a stream's answers
// cannot be sent (its client stopped reading), its reader stops acting on
// requests once maxPending answers wait, so a client that only sends
// cannot grow the server's queue; the stream still ends with its context.
func TestStreamThatDoesNotReadHoldsBackItsRequests(t *testing.T) {
	a := newADSStream[int](1)
	server, stop := context.WithCancel(context.Background())
	defer stop()
	str, end := context.WithCancel(context.Background())
	var reads atomic.Int64
	blocked := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- runStream(a, newStreamEnder(server), str,
			func(context.Context) error { return nil }, func(*corev3.Node) {},
			func() (int, error) { return int(reads.Add(1)), nil },
			func(n int) error { a.out.push(n); return nil },       // every request answered
			func(int, int64) error { <-blocked; return nil }, nil) // the client reads nothing
	}()
	time.Sleep(200 * time.Millisecond)
	if n := reads.Load(); n > maxPending+2 {
		t.Fatalf("%d requests read while answers could not be sent, want at most %d", n, maxPending+2)
	}
	a.out.mu.Lock()
	queued := len(a.out.pending)
	a.out.mu.Unlock()
	if queued > maxPending {
		t.Fatalf("%d answers queued, want at most %d", queued, maxPending)
	}
	close(blocked) // the client reads again: so does the stream
	for deadline := time.Now().Add(5 * time.Second); reads.Load() <= maxPending+2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stream did not read again once its answers could be sent")
		}
	}
	end()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end with its context")
	}
}

// TestFailedReadEndsTheStreamWithItsStatus: a read that fails because
// the client ended the stream ends it quietly; one an interceptor failed
// (authorization refusing a node that changed) ends it with that status,
// which the client sees.
func TestFailedReadEndsTheStreamWithItsStatus(t *testing.T) {
	refused := status.Error(codes.PermissionDenied, "node changed")
	for _, c := range []struct {
		read, want error
	}{
		{io.EOF, nil},
		{status.Error(codes.Canceled, "context canceled"), nil},
		{refused, refused},
	} {
		a := newADSStream[int](1)
		err := runStream(a, newStreamEnder(context.Background()), context.Background(),
			func(context.Context) error { return nil }, func(*corev3.Node) {},
			func() (int, error) { return 0, c.read }, func(int) error { return nil },
			func(int, int64) error { return nil }, nil)
		if !errors.Is(err, c.want) && status.Code(err) != status.Code(c.want) || (c.want == nil) != (err == nil) {
			t.Fatalf("read failing with %v: stream ended with %v, want %v", c.read, err, c.want)
		}
	}
}

// newADSStream is a stream of its own (servers embed theirs).
func newADSStream[R any](id int64) *adsStream[R] {
	a := &adsStream[R]{}
	a.init(id)
	return a
}

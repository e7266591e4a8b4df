package grpcnode_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/grpcnode"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// grpc-node takes the bootstrap `bootstrap -grpc` prints: with no bridge
// behind it a call times out waiting for xDS, rather than failing on the
// bootstrap (as it did before the node carried a locality).
func TestNodeAcceptsGRPCBootstrap(t *testing.T) {
	boot, err := xds.GRPCBootstrap(xds.BootstrapConfig{NodeID: "node-1", XDS: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	c := grpcnode.Start(t, boot)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = c.Call(ctx, "xds:///echo", true)
	t.Logf("call without a bridge: %v", err)
	// A bootstrap grpc-node refuses fails the call at once, Unavailable
	// ("xDS name resolution failed"), instead.
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call = %v; want DeadlineExceeded waiting for xDS, not a bootstrap failure", err)
	}
}

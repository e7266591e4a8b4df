package serve

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestRefusedNodeIsNotEchoedWhole: a client whose certificate does not
// authorize it, asking as a 1 MB node.cluster, is refused; neither the
// log nor the answer carries its node.cluster whole (issue 36).
func TestRefusedNodeIsNotEchoedWhole(t *testing.T) {
	ca := newTestCA(t)
	var logs syncbuffer.Buffer
	s := NewServer(ServerConfig{TLS: serverTLSFiles(t, ca), AuthorizeNodes: true, ShutdownGrace: time.Second,
		Logger: zerolog.New(&logs).Level(zerolog.WarnLevel)})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	t.Cleanup(func() { cancel(); <-done })
	ts := &testServer{Server: s, addr: lis.Addr().String()}
	ts.update(t, testOutput(t, []string{"api"}, 8080))

	webCert, webKey := ca.issue(t, 20, nil, "spiffe://example.org/group/web")
	huge := strings.Repeat("x", 1<<20)
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	c, err := adsclient.Dial(dctx, adsclient.Config{Addr: ts.addr, NodeID: "n-1", Cluster: huge, TLS: clientTLS(t, ca, webCert, webKey), InitialFetchTimeout: -1})
	if err == nil {
		defer c.Close()
		_, err = c.Wait(dctx, func(st adsclient.State) bool { return len(st.ClusterNames()) > 0 })
		if c.Err() != nil {
			err = c.Err()
		}
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("err = %v, want PermissionDenied", err)
	}
	if len(err.Error()) > 2000 {
		t.Errorf("the refusal is %d bytes: it echoes the node.cluster whole", len(err.Error()))
	}
	time.Sleep(100 * time.Millisecond)
	if n := logs.Len(); n > 4000 || !strings.Contains(logs.String(), "does not authorize this node") {
		t.Errorf("the log is %d bytes (want a refusal under 4000):\n%.2000s", n, logs.String())
	}
}

package bridge_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	grpcxds "google.golang.org/grpc/xds"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/bridge"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// The proxyless gRPC mesh enforced by grpc-go on both ends, against a
// real Consul with Connect: the echo server is xds.NewGRPCServer with xDS
// credentials, its clients dial xds:///echo with xDS credentials, all of
// them with the bootstrap `bootstrap -grpc -mesh-cert-dir` prints and the
// certificate files the per-VM agent writes from Consul's Connect CA.
//
// The xDS side is the bridge daemon with the mesh on: it follows the
// Connect-native services (the mesh watcher), their health, the CA
// roots and the intentions, and serves echo's server listener and the
// mesh gRPC cluster xds:///echo goes to.

// meshEcho answers UnaryCall and EmptyCall; an L7 intention allows one
// method and denies the other.
type meshEcho struct {
	testgrpc.UnimplementedTestServiceServer
	id string
}

// UnaryCall answers with the serial of the caller's certificate (as
// Hostname), to see which leaf a client presents.
func (e meshEcho) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	resp := &testgrpc.SimpleResponse{ServerId: e.id}
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			resp.Hostname = ti.State.PeerCertificates[0].SerialNumber.String()
		}
	}
	return resp, nil
}

func (meshEcho) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

const (
	unaryPath = "/grpc.testing.TestService/UnaryCall"
	emptyPath = "/grpc.testing.TestService/EmptyCall"
)

func TestMeshGRPCEnforcement(t *testing.T) {
	ca := consultest.Start(t)
	cl := ca.Client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)

	// Two echo instances: echo-1 binds its registered address, echo-2
	// every address (":0", which Go reports as [::]:PORT), as servers
	// often do; both are registered at 127.0.0.1.
	lis1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis2, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	regs := map[string]int{"echo-1": lis1.Addr().(*net.TCPAddr).Port, "echo-2": lis2.Addr().(*net.TCPAddr).Port, "api-1": 1, "web-1": 2}
	for id, port := range regs {
		if err := cl.Agent().ServiceRegister(&api.AgentServiceRegistration{
			Name: strings.TrimSuffix(strings.TrimSuffix(id, "-1"), "-2"), ID: id, Address: "127.0.0.1", Port: port, Connect: &api.AgentServiceConnect{Native: true},
		}); err != nil {
			t.Fatal(err)
		}
	}
	// L7 intentions need an HTTP-family protocol on the destination.
	if _, _, err := cl.ConfigEntries().Set(&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "echo", Protocol: "grpc"}, nil); err != nil {
		t.Fatal(err)
	}
	setIntentions(t, cl, src("api", api.IntentionActionAllow), src("web", api.IntentionActionDeny))

	// The agent writes each service's leaf, key and the roots.
	dir := t.TempDir()
	certDir := filepath.Join(dir, "certs")
	ag := agent.New(&agent.Config{
		NodeID: "vm-1", DataDir: filepath.Join(dir, "data"), AllowGroups: []string{"*"}, AllowNodeIDs: []string{"*"},
		Socket: filepath.Join(dir, "agent.sock"), SocketMode: 0o660, Upstreams: []string{"127.0.0.1:1"}, AdminListen: "127.0.0.1:0",
		ConsulAddress: ca.HTTPAddr(), ConnectServices: []string{"api", "echo", "web"}, CertDir: certDir,
		BackoffInitial: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond,
	}, log)
	agentDone := make(chan error, 1)
	go func() { agentDone <- ag.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-agentDone })
	for _, svc := range []string{"api", "echo", "web"} {
		for _, f := range []string{xds.MeshCertFile, xds.MeshKeyFile, xds.MeshRootsFile} {
			waitUntil(t, 30*time.Second, "the agent's "+svc+"/"+f, func() bool {
				_, err := os.Stat(filepath.Join(certDir, svc, f))
				return err == nil
			})
		}
	}

	// The bridge, with the mesh on (default deny: the test's Consul has
	// ACLs off, where Consul itself would allow).
	pfile := filepath.Join(dir, "policy.hcl")
	if err := os.WriteFile(pfile, []byte("mesh {\n  default_intention = \"deny\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startBridgeWith(t, ca, consultest.NewForwarder(t, ca.HTTPAddr()), func(c *bridge.Config) {
		c.ConfigFiles = []string{pfile}
		c.Policy = loadPolicy(t, pfile)
	})
	xdsAddr := h.daemon.XDSAddr().String()

	boot := func(node, svc string) []byte {
		b, err := xds.GRPCBootstrap(xds.BootstrapConfig{NodeID: node, XDS: []string{xdsAddr},
			MeshCertDir: filepath.Join(certDir, svc), MeshCertRefresh: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// The echo server: grpc-go's xDS server with xDS credentials.
	screds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	startEcho := func(id string, lis net.Listener) {
		serving := make(chan struct{})
		var once sync.Once
		gs, err := grpcxds.NewGRPCServer(grpc.Creds(screds), grpcxds.BootstrapContentsForTesting(boot(id, "echo")),
			grpcxds.ServingModeCallback(func(_ net.Addr, a grpcxds.ServingModeChangeArgs) {
				if a.Mode == connectivity.ServingModeServing {
					once.Do(func() { close(serving) })
				} else if a.Err != nil {
					t.Logf("%s not serving: %v", id, a.Err)
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		testgrpc.RegisterTestServiceServer(gs, meshEcho{id: id})
		go func() { _ = gs.Serve(lis) }()
		t.Cleanup(gs.Stop)
		select {
		case <-serving:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s (listening on %s) never got its listener from the bridge", id, lis.Addr())
		}
	}
	startEcho("echo-1", lis1)
	startEcho("echo-2", lis2)

	// The clients: xds:///echo with xDS credentials, as api and as web.
	dialOnce := func(svc string) (testgrpc.TestServiceClient, func()) {
		res, err := grpcxds.NewXDSResolverWithConfigForTesting(boot(svc+"-1", svc))
		if err != nil {
			t.Fatal(err)
		}
		creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient("xds:///echo", grpc.WithTransportCredentials(creds), grpc.WithResolvers(res))
		if err != nil {
			t.Fatal(err)
		}
		return testgrpc.NewTestServiceClient(cc), func() { _ = cc.Close() }
	}
	dial := func(svc string) testgrpc.TestServiceClient {
		c, closeC := dialOnce(svc)
		t.Cleanup(closeC)
		return c
	}
	apiC, webC := dial("api"), dial("web")

	// A client without a certificate (TLS, trusting anything) cannot
	// even connect: the handshake fails, RBAC is never asked.
	for id := range map[string]bool{"echo-1": true, "echo-2": true} {
		cc, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", regs[id]), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}))) //nolint:gosec // only the missing client certificate is under test
		if err != nil {
			t.Fatal(err)
		}
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = testgrpc.NewTestServiceClient(cc).UnaryCall(cctx, &testgrpc.SimpleRequest{})
		ccancel()
		_ = cc.Close()
		if code := status.Code(err); code != codes.Unavailable {
			t.Errorf("a client without a certificate to %s: %v (code %v), want the connection refused (Unavailable)", id, err, code)
		}
	}

	// api -> echo allowed, web -> echo denied.
	expect(t, 30*time.Second, "api UnaryCall", apiC, unaryPath, codes.OK)
	expect(t, 10*time.Second, "web UnaryCall", webC, unaryPath, codes.PermissionDenied)
	// grpc-go's round robin picks only ready subchannels: the second
	// instance answers once its connection (a TLS handshake with the
	// leaf) is up, which CI once took longer than 20 quick calls.
	answered := map[string]int{}
	for deadline := time.Now().Add(10 * time.Second); answered["echo-1"] == 0 || answered["echo-2"] == 0; {
		if time.Now().After(deadline) {
			break
		}
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := apiC.UnaryCall(cctx, &testgrpc.SimpleRequest{})
		ccancel()
		if err != nil {
			t.Fatalf("api UnaryCall: %v", err)
		}
		answered[resp.GetServerId()]++
		time.Sleep(10 * time.Millisecond)
	}
	if answered["echo-1"] == 0 || answered["echo-2"] == 0 {
		t.Errorf("api's calls were answered by %v, want both instances (the exact and the wildcard listener)", answered)
	}

	// Flip: web allowed, api denied.
	start := time.Now()
	setIntentions(t, cl, src("api", api.IntentionActionDeny), src("web", api.IntentionActionAllow))
	expect(t, 10*time.Second, "web UnaryCall after the flip", webC, unaryPath, codes.OK)
	expect(t, 10*time.Second, "api UnaryCall after the flip", apiC, unaryPath, codes.PermissionDenied)
	took := time.Since(start)
	t.Logf("intention flip enforced by grpc-go %v after the Consul write", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("the flip took %v, want within 2s", took)
	}

	// L7: api may call UnaryCall, not EmptyCall.
	setIntentions(t, cl, &api.SourceIntention{Name: "api", Permissions: []*api.IntentionPermission{
		{Action: api.IntentionActionAllow, HTTP: &api.IntentionHTTPPermission{PathExact: unaryPath}},
		{Action: api.IntentionActionDeny, HTTP: &api.IntentionHTTPPermission{PathExact: emptyPath}},
	}}, src("web", api.IntentionActionDeny))
	expect(t, 10*time.Second, "api UnaryCall (L7 allowed)", apiC, unaryPath, codes.OK)
	expect(t, 10*time.Second, "api EmptyCall (L7 denied)", apiC, emptyPath, codes.PermissionDenied)
	expect(t, 10*time.Second, "api UnaryCall (L7 allowed), again", apiC, unaryPath, codes.OK)
	expect(t, 10*time.Second, "web UnaryCall (L4 denied)", webC, unaryPath, codes.PermissionDenied)

	// A CA rotation: the agent rewrites the files, grpc-go's file_watcher
	// reloads them, and a new connection presents the new leaf, which
	// the server (whose roots now hold both CAs) accepts.
	serial := func(svc string) string {
		b, err := os.ReadFile(filepath.Join(certDir, svc, xds.MeshCertFile))
		if err != nil {
			return ""
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			return ""
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return ""
		}
		return c.SerialNumber.String()
	}
	oldSerial := serial("api")
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalECPrivateKey(k)
	if _, err := cl.Connect().CASetConfig(&api.CAConfig{Provider: "consul", Config: map[string]any{
		"PrivateKey": string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})),
	}}, nil); err != nil {
		t.Fatal(err)
	}
	rotated := time.Now()
	waitUntil(t, 30*time.Second, "api's rotated leaf on disk", func() bool { s := serial("api"); return s != "" && s != oldSerial })
	newSerial := serial("api")
	t.Logf("the agent wrote api's rotated leaf %v after the CA rotation", time.Since(rotated).Round(time.Millisecond))
	deadline := time.Now().Add(15 * time.Second)
	for {
		// A new channel each time: a connection keeps the leaf of its
		// handshake, which may predate file_watcher's next refresh.
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		fresh, closeFresh := dialOnce("api")
		resp, err := fresh.UnaryCall(cctx, &testgrpc.SimpleRequest{})
		closeFresh()
		ccancel()
		if err == nil && resp.GetHostname() == newSerial {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the CA rotation a new api connection presents serial %q (err %v), want the rotated leaf %s (was %s)", resp.GetHostname(), err, newSerial, oldSerial)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("a new connection presents the rotated leaf %v after the CA rotation", time.Since(rotated).Round(time.Millisecond))

	// A gRPC client outside the mesh (no certificate provider in its
	// bootstrap) NACKs the mesh cluster rather than calling in plaintext.
	plainBoot, err := xds.GRPCBootstrap(xds.BootstrapConfig{NodeID: "plain-1", XDS: []string{xdsAddr}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := grpcxds.NewXDSResolverWithConfigForTesting(plainBoot)
	if err != nil {
		t.Fatal(err)
	}
	pcreds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	pcc, err := grpc.NewClient("xds:///echo", grpc.WithTransportCredentials(pcreds), grpc.WithResolvers(res))
	if err != nil {
		t.Fatal(err)
	}
	defer pcc.Close()
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = testgrpc.NewTestServiceClient(pcc).UnaryCall(pctx, &testgrpc.SimpleRequest{})
	pcancel()
	if err == nil {
		t.Error("a gRPC client outside the mesh called echo")
	}
	waitUntil(t, 10*time.Second, "the client outside the mesh NACKing the mesh cluster", func() bool {
		p := proxyByNode(proxies(t, h), "plain-1")
		return p != nil && p.Types["CDS"] != nil && p.Types["CDS"].Status == serve.StatusNACKed
	})

	for _, p := range proxies(t, h) {
		if p.Status == serve.StatusNACKed && p.NodeID != "plain-1" {
			t.Errorf("%s NACKed: %+v", p.NodeID, p.Types)
		}
	}
}

func src(name string, a api.IntentionAction) *api.SourceIntention {
	return &api.SourceIntention{Name: name, Action: a}
}

func setIntentions(t *testing.T, cl *api.Client, sources ...*api.SourceIntention) {
	t.Helper()
	if _, _, err := cl.ConfigEntries().Set(&api.ServiceIntentionsConfigEntry{Kind: api.ServiceIntentions, Name: "echo", Sources: sources}, nil); err != nil {
		t.Fatal(err)
	}
}

// expect calls method until the outcome is settled (not Unavailable, as
// while a client resolves or reconnects after the server's listener
// changed) and fails unless it is want.
func expect(t *testing.T, within time.Duration, what string, c testgrpc.TestServiceClient, method string, want codes.Code) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var err error
		if method == emptyPath {
			_, err = c.EmptyCall(ctx, &testgrpc.Empty{})
		} else {
			_, err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		}
		cancel()
		if status.Code(err) == want {
			// Settled: the next calls (over both instances) agree.
			for range 6 {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				if method == emptyPath {
					_, err = c.EmptyCall(ctx, &testgrpc.Empty{})
				} else {
					_, err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
				}
				cancel()
				if status.Code(err) != want {
					t.Fatalf("%s: %v, then a call over the other instance: %v (code %v)", what, want, err, status.Code(err))
				}
			}
			return
		}
		last = err
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: %v (code %v) for %v, want %v", what, last, status.Code(last), within, want)
}

func waitUntil(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

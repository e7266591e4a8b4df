package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/testpki"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// TestAgentOverMutualTLS: the agent reaches a central bridge that requires
// client certificates and authorize_nodes with its own certificate,
// verifying the bridge's name; the groups its certificate names are
// relayed, another group the agent allows locally is refused upstream
// and its local proxy is refused with the central's reason.
func TestAgentOverMutualTLS(t *testing.T) {
	ca := consultest.Start(t)
	ca.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	pki := testpki.New(t)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile := write("ca.pem", pki.PEM)
	srvCert, srvKey := pki.Issue(testpki.Leaf{DNS: []string{"bridge.internal"}})
	agCert, agKey := pki.Issue(testpki.Leaf{URIs: []string{"spiffe://test/group/web"}})
	srvCertFile, srvKeyFile := write("srv.pem", srvCert), write("srv-key.pem", srvKey)
	agCertFile, agKeyFile := write("ag.pem", agCert), write("ag-key.pem", agKey)
	cen := startCentral(t, ca.HTTPAddr(), freeAddr(t), func(s *policy.Settings) {
		s.XDS.TLS = policy.TLSFiles{CertFile: srvCertFile, KeyFile: srvKeyFile, ClientCAFile: caFile}
		s.XDS.AuthorizeNodes = true
	})
	ag := startAgentWith(t, dir, func(c *agent.Config) {
		c.Upstreams = []string{cen.addr}
		c.TLS = agent.UpstreamTLS{CAFile: caFile, CertFile: agCertFile, KeyFile: agKeyFile, ServerName: "bridge.internal"}
	})
	sock := "unix://" + ag.SocketAddr().String()
	web := dial(t, sock, "web", adsclient.Delta)
	wait(t, web, "web endpoints over mTLS", 15*time.Second, func(s adsclient.State) bool { return health(s, "web") == "127.0.0.1:1001=HEALTHY" })

	// Allowed here, not by the certificate: refused to the local proxy
	// with the central's reason (not left waiting), and the agent stays
	// ready for web, listing edge-1 as refused (issue 36, 9).
	edge := dial(t, sock, "edge-1", adsclient.Delta)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := edge.Wait(ctx, func(s adsclient.State) bool { return len(s.ClusterNames()) > 0 }); err == nil {
		t.Fatalf("a group the agent's certificate does not name was relayed: %v", st.ClusterNames())
	}
	if err := edge.Err(); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "does not authorize node") {
		t.Fatalf("edge-1's local stream: %v, want PermissionDenied with the central's reason", err)
	}
	if got := readyz(t, ag); !strings.Contains(got, `"status":"ready"`) || !strings.Contains(got, `"refused":"the central bridge refuses`) {
		t.Fatalf("/readyz = %s, want ready with edge-1 refused", got)
	}

	// A wrong server name fails the handshake: nothing is relayed.
	ag2 := startAgentWith(t, t.TempDir(), func(c *agent.Config) {
		c.Upstreams = []string{cen.addr}
		c.TLS = agent.UpstreamTLS{CAFile: caFile, CertFile: agCertFile, KeyFile: agKeyFile, ServerName: "impostor.internal"}
	})
	other := dial(t, "unix://"+ag2.SocketAddr().String(), "web", adsclient.Delta)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	if _, err := other.Wait(ctx2, func(s adsclient.State) bool { return len(s.ClusterNames()) > 0 }); err == nil {
		t.Fatal("an agent verifying the wrong server name was served")
	}
}

package agent

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

func TestExampleConfigParses(t *testing.T) {
	src, err := os.ReadFile("../examples/vm/agent.hcl")
	if err != nil {
		t.Fatal(err)
	}
	c, diags := ParseConfig("agent.hcl", src)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if c.SocketMode != 0o660 || c.SocketGroup != "envoy" || c.ConsulService != "consul-xds-bridge" || c.TLS.CertFile == "" || c.NodeID != "vm-web-1" {
		t.Fatalf("parsed %+v", c)
	}
	if w := c.Leaf["web"]; len(w.ProxyGroups) != 1 || w.ProxyGroups[0] != "web" || len(w.Users) != 1 || c.MaxMessageSize != 64<<20 {
		t.Errorf("connect service web's access %+v, max_message_size %d", w, c.MaxMessageSize)
	}
	if err := c.allowed("envoy-1", "sidecar-web-3"); err != nil {
		t.Errorf("an allowed group refused: %v", err)
	}
	if err := c.allowed("envoy-1", "edge"); err == nil || !strings.Contains(err.Error(), `"edge" is not allowed on this host`) {
		t.Errorf("another group: %v, want a refusal naming it", err)
	}
}

func TestConfigErrorsHavePositions(t *testing.T) {
	for src, want := range map[string]string{
		"allow_groups = [\"*\"]\nupstream {}\n":                                                                                      "agent.hcl:2:1: Upstream needs exactly one source",
		"allow_groups = []\nupstream {\n  addresses = [\"a:1\"]\n}\n":                                                                "No allowed groups",
		"allow_groups = [\"[\"]\nupstream {\n  addresses = [\"a:1\"]\n}\n":                                                           "Invalid pattern",
		"allow_groups = [\"*\"]\nlisten {\n  socket_mode = \"999\"\n}\nupstream {\n  addresses = [\"a:1\"]\n}\n":                     "Invalid socket_mode",
		"allow_groups = [\"*\"]\nupstream {\n  addresses = [\"a:1\"]\n  tls {\n    ca_file = \"c\"\n    cert_file = \"x\"\n  }\n}\n": "Incomplete client certificate",
		"allow_groups = [\"*\"]\nbogus = 1\nupstream {\n  addresses = [\"a:1\"]\n}\n":                                                "agent.hcl:2:1: Unsupported argument",
	} {
		_, diags := ParseConfig("agent.hcl", []byte(src))
		if got := diagText(diags); !strings.Contains(got, want) {
			t.Errorf("%q: diagnostics %q, want %q", src, got, want)
		}
	}
}

func diagText(diags hcl.Diagnostics) string {
	var out []string
	for _, d := range diags {
		pos := ""
		if d.Subject != nil {
			pos = fmt.Sprintf("%s:%d:%d: ", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column)
		}
		out = append(out, pos+d.Summary+": "+d.Detail)
	}
	return strings.Join(out, "\n")
}

func TestConnectCertDir(t *testing.T) {
	base := "allow_groups = [\"*\"]\nupstream {\n  addresses = [\"a:1\"]\n}\n"
	c, diags := ParseConfig("agent.hcl", []byte(base+"connect {\n  services = [\"echo\"]\n  cert_dir = \"/run/certs\"\n}\n"))
	if diags.HasErrors() || c.CertDir != "/run/certs" || len(c.ConnectServices) != 1 {
		t.Fatalf("parsed %+v, %v", c, diags)
	}
	for src, want := range map[string]string{
		"connect {\n  services = [\"echo\"]\n  cert_dir = \"certs\"\n}\n":  "Relative cert_dir",
		"connect {\n  services = [\"../x\"]\n  cert_dir = \"/certs\"\n}\n": "Invalid connect service",
	} {
		_, diags := ParseConfig("agent.hcl", []byte(base+src))
		if got := diagText(diags); !strings.Contains(got, want) {
			t.Errorf("%q: diagnostics %q, want %q", src, got, want)
		}
	}
}

package consul_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// fakeConsul answers /v1/status/leader and records the token of each
// request it gets.
type fakeConsul struct {
	*httptest.Server
	mu     sync.Mutex
	tokens []string
}

func newFakeConsul(t *testing.T) *fakeConsul {
	t.Helper()
	f := &fakeConsul{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.tokens = append(f.tokens, r.Header.Get("X-Consul-Token"))
		f.mu.Unlock()
		fmt.Fprint(w, `"127.0.0.1:8300"`)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeConsul) addr() string { return strings.TrimPrefix(f.URL, "http://") }

func (f *fakeConsul) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.tokens...)
}

// TestClientHonoursConsulEnvironment: the connection settings honour
// Consul's environment variables (CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN,
// CONSUL_HTTP_TOKEN_FILE) and the config file's consul block overrides
// them, field by field (docs/getting-started.md, docs/reference/daemon-
// settings.md). The client is built from the loaded settings as the
// daemon builds it (bridge.Daemon.Run, plan), and a request shows which
// agent it reached with which token.
func TestClientHonoursConsulEnvironment(t *testing.T) {
	dir := t.TempDir()
	writeToken := func(name, tok string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	envTokenFile, fileTokenFile := writeToken("env-token", "token-from-env-file"), writeToken("file-token", "token-from-config")
	envAgent, fileAgent := newFakeConsul(t), newFakeConsul(t)

	tests := map[string]struct {
		env    map[string]string
		consul string // the config's consul block's body
		// want is the agent the request must reach and the token it
		// must carry; the other agent must get nothing.
		want, other *fakeConsul
		wantToken   string
	}{
		"environment only": {
			env:  map[string]string{"CONSUL_HTTP_ADDR": envAgent.addr(), "CONSUL_HTTP_TOKEN_FILE": envTokenFile},
			want: envAgent, other: fileAgent, wantToken: "token-from-env-file",
		},
		"CONSUL_HTTP_TOKEN": {
			env:  map[string]string{"CONSUL_HTTP_ADDR": envAgent.addr(), "CONSUL_HTTP_TOKEN": "token-from-env"},
			want: envAgent, other: fileAgent, wantToken: "token-from-env",
		},
		"the file overrides both": {
			env:    map[string]string{"CONSUL_HTTP_ADDR": envAgent.addr(), "CONSUL_HTTP_TOKEN_FILE": envTokenFile},
			consul: fmt.Sprintf("address = %q\ntoken_file = %q\n", fileAgent.addr(), fileTokenFile),
			want:   fileAgent, other: envAgent, wantToken: "token-from-config",
		},
		"token_file overrides CONSUL_HTTP_TOKEN": {
			env:    map[string]string{"CONSUL_HTTP_ADDR": envAgent.addr(), "CONSUL_HTTP_TOKEN": "token-from-env"},
			consul: fmt.Sprintf("token_file = %q\n", fileTokenFile),
			want:   envAgent, other: fileAgent, wantToken: "token-from-config",
		},
		"address from the file, token from the environment": {
			env:    map[string]string{"CONSUL_HTTP_ADDR": envAgent.addr(), "CONSUL_HTTP_TOKEN_FILE": envTokenFile},
			consul: fmt.Sprintf("address = %q\n", fileAgent.addr()),
			want:   fileAgent, other: envAgent, wantToken: "token-from-env-file",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, k := range []string{"CONSUL_HTTP_ADDR", "CONSUL_HTTP_TOKEN", "CONSUL_HTTP_TOKEN_FILE"} {
				t.Setenv(k, tc.env[k]) // "" where the case sets none
			}
			src := "xds {\n  listen = \"127.0.0.1:18000\"\n}\n"
			if tc.consul != "" {
				src += "consul {\n" + tc.consul + "}\n"
			}
			cfgFile := filepath.Join(t.TempDir(), "config.hcl")
			if err := os.WriteFile(cfgFile, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, _, diags := policy.LoadFiles(cfgFile)
			if diags.HasErrors() {
				t.Fatalf("LoadFiles: %s", diags.Error())
			}
			s := cfg.Settings.Consul
			client, err := consul.NewClient(consul.ClientConfig{Address: s.Address, Datacenter: s.Datacenter, TokenFile: s.TokenFile})
			if err != nil {
				t.Fatal(err)
			}
			wantBefore, otherBefore := len(tc.want.seen()), len(tc.other.seen())
			if _, err := client.Status().Leader(); err != nil {
				t.Fatalf("request: %v", err)
			}
			got := tc.want.seen()[wantBefore:]
			if len(got) != 1 || got[0] != tc.wantToken {
				t.Errorf("the expected agent got requests with tokens %q, want one with %q", got, tc.wantToken)
			}
			if n := len(tc.other.seen()) - otherBefore; n != 0 {
				t.Errorf("the other agent got %d request(s)", n)
			}
		})
	}
}

package consul

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/hostilefile"
)

// TestNewClientTokenFileBounded: the ACL token file (consul.token_file,
// or CONSUL_HTTP_TOKEN_FILE) is read by NewClient as every file the bridge
// is told to read: a FIFO is refused at once, where Consul's client read
// it and held the bridge's start forever; a file over 4 KiB is refused by
// its size; a token file's token, trimmed, is what requests carry, the
// file named by the setting winning over the environment's.
func TestNewClientTokenFileBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := hostilefile.FIFO(t, "fifo")
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 8<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ file, env, want string }{
		"FIFO":            {file: fifo, want: "consul token file: read " + fifo + ": not a regular file (a FIFO)"},
		"FIFO in the env": {env: fifo, want: "not a regular file (a FIFO)"},
		"too large":       {file: big, want: "8192 bytes, over the limit of 4096"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("CONSUL_HTTP_TOKEN_FILE", tc.env)
			hostilefile.Refused(t, "NewClient", tc.want, func() error {
				_, err := NewClient(ClientConfig{Address: "127.0.0.1:1", TokenFile: tc.file})
				return err
			})
		})
	}

	var mu sync.Mutex
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Get("X-Consul-Token")
		mu.Unlock()
		w.Write([]byte(`"dc1-leader:8300"`))
	}))
	defer srv.Close()
	token, envToken := filepath.Join(dir, "token"), filepath.Join(dir, "env-token")
	os.WriteFile(token, []byte("  the-token\n"), 0o600)
	os.WriteFile(envToken, []byte("env-token\n"), 0o600)
	t.Setenv("CONSUL_HTTP_TOKEN_FILE", envToken)
	c, err := NewClient(ClientConfig{Address: strings.TrimPrefix(srv.URL, "http://"), TokenFile: token})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status().Leader(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got != "the-token" {
		t.Fatalf("requests carry token %q, want the setting's file's, trimmed", got)
	}
}

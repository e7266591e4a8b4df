package consul

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestNewClientTokenFileBounded: the ACL token file (consul.token_file,
// or CONSUL_HTTP_TOKEN_FILE) is read by NewClient as every file the bridge
// is told to read: a FIFO is refused at once, where Consul's client read
// it and held the bridge's start forever; a file over 4 KiB is refused by
// its size; a token file's token, trimmed, is what requests carry, the
// file named by the setting winning over the environment's.
func TestNewClientTokenFileBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
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
			done := make(chan error, 1)
			go func() {
				_, err := NewClient(ClientConfig{Address: "127.0.0.1:1", TokenFile: tc.file})
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want one saying %q", err, tc.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("NewClient still running after 5 s: the read waits on the FIFO")
			}
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

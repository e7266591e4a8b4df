package agent_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/agent"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/modroot"
)

// The lifecycle tests run internal/fakeenvoy, a stand-in written from
// Envoy's documentation (no Envoy binary can be installed here), built
// once per test binary.
var fakeEnvoy struct {
	once sync.Once
	path string
	err  error
}

func fakeEnvoyBinary(t *testing.T) string {
	t.Helper()
	fakeEnvoy.once.Do(func() {
		dir, err := os.MkdirTemp("", "fakeenvoy")
		if err != nil {
			fakeEnvoy.err = err
			return
		}
		fakeEnvoy.path = filepath.Join(dir, "envoy")
		cmd := exec.Command("go", "build", "-o", fakeEnvoy.path, "./internal/fakeenvoy")
		cmd.Dir = modroot.Dir()
		if out, err := cmd.CombinedOutput(); err != nil {
			fakeEnvoy.err = err
			fakeEnvoy.path = string(out)
		}
	})
	if fakeEnvoy.err != nil {
		t.Fatalf("building the Envoy stand-in: %v\n%s", fakeEnvoy.err, fakeEnvoy.path)
	}
	return fakeEnvoy.path
}

// buildFakeEnvoy builds the stand-in with another hot restart
// compatibility version (a binary Envoy cannot hot-restart into).
func buildFakeEnvoy(t *testing.T, out, hotRestartVersion string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-ldflags", "-X main.hotRestartVersion="+hotRestartVersion, "-o", out, "./internal/fakeenvoy")
	cmd.Dir = modroot.Dir()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in: %v\n%s", err, b)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// envoyEvent is one line of the stand-in's record.
type envoyEvent struct {
	Event    string   `json:"event"`
	PID      int      `json:"pid"`
	Epoch    int      `json:"epoch"`
	T        int64    `json:"t"`
	Args     []string `json:"args"`
	State    string   `json:"state"`
	Graceful bool     `json:"graceful"`
	Why      string   `json:"why"`
	// ConsulEnv names the CONSUL_* variables Envoy was started with.
	ConsulEnv []string `json:"consul_env"`
}

func readEvents(t *testing.T, file string) []envoyEvent {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []envoyEvent
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var e envoyEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("record line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

// find returns the events matching pred.
func find(evs []envoyEvent, pred func(envoyEvent) bool) []envoyEvent {
	var out []envoyEvent
	for _, e := range evs {
		if pred(e) {
			out = append(out, e)
		}
	}
	return out
}

// eventually polls cond every 50ms for up to within.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readyz is the agent's /readyz: code and body.
func agentReadyz(t *testing.T, ag *runningAgent) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get("http://" + ag.AdminAddr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

func envoyStatus(t *testing.T, ag *runningAgent) agent.EnvoyStatus {
	t.Helper()
	var body struct {
		Envoys []agent.EnvoyStatus `json:"envoys"`
	}
	resp, err := http.Get("http://" + ag.AdminAddr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || len(body.Envoys) != 1 {
		t.Fatalf("/readyz envoys: %v %+v", err, body)
	}
	return body.Envoys[0]
}

func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// keptConn is one HTTP/1.1 connection kept open across requests.
type keptConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialKept(t *testing.T, addr string) *keptConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keptConn{c: c, r: bufio.NewReader(c)}
}

// get sends GET / on the connection: the body and whether the response
// says Connection: close.
func (k *keptConn) get(t *testing.T) (string, bool) {
	t.Helper()
	_ = k.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(k.c, "GET / HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), resp.Close
}

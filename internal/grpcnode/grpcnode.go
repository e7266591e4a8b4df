// Package grpcnode runs grpc-node (@grpc/grpc-js with @grpc/grpc-js-xds) as
// a second real xDS client in tests, beside grpc-go: a small Node script
// (client.js) that makes calls to grpc.testing.TestService/UnaryCall over
// xds:/// targets when the test asks, on stdin, and answers on stdout.
//
// The npm packages are pinned by this directory's package.json and
// package-lock.json; `make test` installs them with `npm ci` into
// <module root>/.tools/node (see the Makefile's node-deps target). Without
// that install (or with one from another lock file) tests skip, except
// under CI=true, where they fail: a missing client must not silently turn
// the second client's tests into skips.
package grpcnode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/modroot"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
)

const installHint = "run `make node-deps` (part of `make test`): it installs @grpc/grpc-js-xds into .tools/node with npm ci"

// install is where the packages and the script are, once found.
type install struct {
	node, script, modules string
}

// find locates node, the script and an install made from the committed
// lock file, or says what is missing.
func find() (install, error) {
	root := modroot.Dir()
	if root == "" {
		return install{}, fmt.Errorf("no go.mod above the working directory")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return install{}, fmt.Errorf("no node on PATH: %w", err)
	}
	in := install{
		node:    node,
		script:  filepath.Join(root, "internal", "grpcnode", "client.js"),
		modules: filepath.Join(root, ".tools", "node", "node_modules"),
	}
	want, err := os.ReadFile(filepath.Join(root, "internal", "grpcnode", "package-lock.json"))
	if err != nil {
		return install{}, err
	}
	got, err := os.ReadFile(filepath.Join(root, ".tools", "node", "package-lock.json"))
	if err != nil {
		return install{}, fmt.Errorf("not installed: %w", err)
	}
	if !bytes.Equal(got, want) {
		return install{}, fmt.Errorf(".tools/node was installed from another package-lock.json")
	}
	if _, err := os.Stat(filepath.Join(in.modules, "@grpc", "grpc-js-xds", "package.json")); err != nil {
		return install{}, fmt.Errorf("not installed: %w", err)
	}
	return in, nil
}

// Require skips the test (fails it under CI=true) unless the grpc-node
// client can run.
func Require(t testing.TB) {
	t.Helper()
	require(t)
}

func require(t testing.TB) install {
	t.Helper()
	in, err := find()
	if err == nil {
		return in
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("grpcnode: grpc-node client unavailable: %v; %s", err, installHint)
	}
	t.Skipf("grpcnode: grpc-node client unavailable: %v; %s", err, installHint)
	return install{}
}

// Client is one Node process: one gRPC xDS client (one node identity,
// one bootstrap) with a channel per target it has called.
type Client struct {
	stdin  io.WriteCloser
	mu     sync.Mutex
	nextID int
	wait   map[int]chan reply
	done   chan struct{} // closed when stdout ends
	stderr *syncbuffer.Buffer
}

type reply struct {
	ID       int    `json:"id"`
	Ready    bool   `json:"ready"`
	ServerID string `json:"server_id"`
	Code     *int   `json:"code"`
	Details  string `json:"details"`
}

// Start runs a grpc-node client whose xDS bootstrap is the given JSON,
// written to a file for GRPC_XDS_BOOTSTRAP as a user would. The process
// ends with the test; its log (grpc-js tracing of the xDS client) is
// printed if the test failed.
func Start(t testing.TB, bootstrap []byte) *Client {
	t.Helper()
	in := require(t)
	file := filepath.Join(t.TempDir(), "grpc-bootstrap.json")
	if err := os.WriteFile(file, bootstrap, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(in.node, in.script)
	cmd.Env = append(os.Environ(),
		"NODE_PATH="+in.modules,
		"GRPC_XDS_BOOTSTRAP="+file,
		"GRPC_XDS_BOOTSTRAP_CONFIG=",
		// What a failing test needs to see: the xDS client's view.
		"GRPC_TRACE=xds_client,xds_resolver,cds_balancer",
		"GRPC_VERBOSITY=DEBUG",
	)
	c := &Client{wait: map[int]chan reply{}, done: make(chan struct{}), stderr: &syncbuffer.Buffer{}}
	cmd.Stderr = c.stderr
	var err error
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("grpcnode: start node: %v", err)
	}
	ready := make(chan struct{})
	go c.read(stdout, ready)
	t.Cleanup(func() {
		_ = c.stdin.Close() // the script exits when stdin closes
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("grpc-node client log (last 8 KiB):\n%s", tail(c.stderr.String(), 8<<10))
		}
	})
	select {
	case <-ready:
	case <-c.done:
		t.Fatalf("grpcnode: the client exited before it was ready:\n%s", tail(c.stderr.String(), 8<<10))
	case <-time.After(20 * time.Second):
		t.Fatalf("grpcnode: the client was not ready within 20s:\n%s", tail(c.stderr.String(), 8<<10))
	}
	return c
}

func (c *Client) read(stdout io.Reader, ready chan struct{}) {
	defer close(c.done)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r reply
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue
		}
		if r.Ready {
			close(ready)
			continue
		}
		c.mu.Lock()
		ch := c.wait[r.ID]
		delete(c.wait, r.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
}

// Call makes one UnaryCall to target with metadata md (key, value
// pairs), within ctx's deadline (5s without one), and returns the
// answering instance's id, or the call's status as an error
// (status.Code works on it as on grpc-go's errors).
func (c *Client) Call(ctx context.Context, target string, waitForReady bool, md ...string) (string, error) {
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	meta := map[string]string{}
	for i := 0; i+1 < len(md); i += 2 {
		meta[md[i]] = md[i+1]
	}
	ch := make(chan reply, 1)
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	c.wait[id] = ch
	line, err := json.Marshal(map[string]any{
		"id": id, "target": target, "metadata": meta,
		"timeout_ms": max(timeout.Milliseconds(), 1), "wait_for_ready": waitForReady,
	})
	if err == nil {
		_, err = c.stdin.Write(append(line, '\n'))
	}
	c.mu.Unlock()
	if err != nil {
		return "", fmt.Errorf("grpcnode: send call: %w", err)
	}
	// The client enforces the deadline itself; the extra second only
	// covers a process that stopped answering.
	select {
	case r := <-ch:
		if r.Code != nil {
			return "", status.Error(codes.Code(*r.Code), r.Details)
		}
		return r.ServerID, nil
	case <-c.done:
		return "", fmt.Errorf("grpcnode: the client exited:\n%s", tail(c.stderr.String(), 4<<10))
	case <-time.After(timeout + time.Second):
		return "", fmt.Errorf("grpcnode: no answer within %v", timeout+time.Second)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

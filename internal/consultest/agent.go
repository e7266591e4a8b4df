// Package consultest runs real Consul agents (and a TCP forwarder to cut the
// path to them) for integration tests.
//
// Agents bind to 127.0.0.1 with every port chosen at random, so any number of
// tests can run them in parallel. The consul binary is found by [Binary].
package consultest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
	"github.com/hashicorp/consul/api"
)

const (
	readyTimeout = 30 * time.Second
	stopTimeout  = 5 * time.Second
	startTries   = 3
)

// Option configures an agent started by [Start].
type Option func(*config)

type config struct {
	dataDir    string
	persistent bool
	hcl        []string
	token      string
	dc         string
	primary    string
}

// WithDatacenter runs the agent in datacenter dc, WAN-federated under
// primary (Consul's primary_datacenter, whose Connect CA signs this one's
// intermediate, so both share one trust domain); join the two with
// [Agent.JoinWAN].
func WithDatacenter(dc, primary string) Option {
	return func(c *config) { c.dc, c.primary = dc, primary }
}

// WithDataDir runs the agent as a single non-dev server (-server
// -bootstrap-expect 1) that keeps its state in dir, so a test can Kill and
// Restart it and find its data again. An empty dir means a fresh temporary one.
func WithDataDir(dir string) Option {
	return func(c *config) { c.persistent, c.dataDir = true, dir }
}

// WithHCL adds agent configuration, e.g. an acl block. It may be given more
// than once. With ACLs in default-deny mode also pass [WithToken] and set
// acl.tokens.agent, or the agent cannot register its own node and Start times
// out waiting for it.
func WithHCL(hcl string) Option {
	return func(c *config) { c.hcl = append(c.hcl, hcl) }
}

// WithToken sets the ACL token that Start's readiness checks and
// [Agent.Client] use.
func WithToken(token string) Option {
	return func(c *config) { c.token = token }
}

// Agent is a running consul agent owned by one test.
type Agent struct {
	bin     string
	args    []string
	node    string
	dc      string
	token   string
	http    string
	serfWAN string
	grpc    string
	client  *api.Client
	out     syncbuffer.Buffer

	mu   sync.Mutex
	proc *process
}

// process is one run of the agent binary; err is valid once done is closed.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

var nodeSeq atomic.Int64

// Start runs a consul agent (a -dev agent unless [WithDataDir] is given) and
// waits until it has a leader and its own node is in the catalog, so that
// registrations work at once. The agent is stopped on test cleanup, and its
// output is logged if the test failed.
func Start(t testing.TB, opts ...Option) *Agent {
	t.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	a := &Agent{
		bin:   Binary(t),
		node:  fmt.Sprintf("consultest-%d-%d", os.Getpid(), nodeSeq.Add(1)),
		token: cfg.token,
		dc:    cmp.Or(cfg.dc, "dc1"),
	}
	// Registered before stop so that it runs after it and shows the shutdown too.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("consul agent %s output:\n%s", a.node, a.out.String())
		}
	})
	t.Cleanup(a.stop)

	base := []string{"agent", "-node", a.node, "-bind", "127.0.0.1", "-client", "127.0.0.1", "-log-level", "warn"}
	if cfg.persistent {
		dir := cfg.dataDir
		if dir == "" {
			dir = t.TempDir()
		}
		base = append(base, "-server", "-bootstrap-expect", "1", "-data-dir", dir, "-ui=false",
			// The production raft timings make each (re)start wait ~8s for an election.
			"-hcl", "performance { raft_multiplier = 1 }")
	} else {
		base = append(base, "-dev")
	}
	if cfg.dc != "" {
		base = append(base, "-datacenter", cfg.dc, "-hcl", fmt.Sprintf("primary_datacenter = %q", cmp.Or(cfg.primary, cfg.dc)))
	}
	if len(cfg.hcl) > 0 {
		cfgDir := t.TempDir()
		for i, hcl := range cfg.hcl {
			p := filepath.Join(cfgDir, fmt.Sprintf("extra-%d.hcl", i))
			if err := os.WriteFile(p, []byte(hcl), 0o600); err != nil {
				t.Fatalf("consultest: write config: %v", err)
			}
			base = append(base, "-config-file", p)
		}
	}

	for try := 1; ; try++ {
		ports, err := freePorts()
		if err != nil {
			t.Fatalf("consultest: %v", err)
		}
		a.args = slices.Clone(base)
		for _, pf := range portFlags {
			a.args = append(a.args, "-"+pf.flag, strconv.Itoa(ports[pf.flag]))
		}
		a.http = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports["http-port"]))
		a.grpc = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports["grpc-port"]))
		a.serfWAN = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports["serf-wan-port"]))
		a.client = a.newClient(nil)

		lostPort, err := a.run()
		if err == nil {
			return a
		}
		if try < startTries && lostPort {
			fmt.Fprintf(&a.out, "consultest: start attempt %d lost a port race, retrying with new ports\n", try)
			continue
		}
		t.Fatalf("consultest: start consul agent %s: %v", a.node, err)
	}
}

// GRPCAddr is the agent's plaintext gRPC port, where Consul serves its
// own xDS to Connect proxies.
func (a *Agent) GRPCAddr() string { return a.grpc }

// HTTPAddr returns the agent's HTTP API address as "127.0.0.1:port".
func (a *Agent) HTTPAddr() string { return a.http }

// Client returns a consul/api client for the agent, using the [WithToken] token.
func (a *Agent) Client() *api.Client { return a.client }

// Datacenter returns the agent's datacenter: Consul's default "dc1" unless
// [WithDatacenter] names another.
func (a *Agent) Datacenter() string { return a.dc }

// JoinWAN joins the agent to other's WAN pool (both must be servers: -dev
// agents are) and waits until each lists the other's datacenter, so that
// ?dc= queries and cross-datacenter Connect work at once.
func (a *Agent) JoinWAN(t testing.TB, other *Agent) {
	t.Helper()
	if err := a.client.Agent().Join(other.serfWAN, true); err != nil {
		t.Fatalf("consultest: WAN join %s -> %s: %v", a.dc, other.dc, err)
	}
	deadline := time.Now().Add(readyTimeout)
	for _, pair := range [][2]*Agent{{a, other}, {other, a}} {
		for {
			dcs, err := pair[0].client.Catalog().Datacenters()
			if err == nil && slices.Contains(dcs, pair[1].dc) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("consultest: %s never saw datacenter %s over the WAN (last: %v, %v)", pair[0].dc, pair[1].dc, dcs, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// NodeName returns the agent's node name, unique within the test binary run.
func (a *Agent) NodeName() string { return a.node }

// Freeze stops the agent process (SIGSTOP) and waits until it is stopped: its
// sockets stay open but nothing answers, like a hung or partitioned agent.
func (a *Agent) Freeze() {
	if p := a.current(); p != nil {
		p.cmd.Process.Signal(syscall.SIGSTOP)
		waitStopped(p.cmd.Process.Pid)
	}
}

// Thaw resumes an agent stopped by [Agent.Freeze].
func (a *Agent) Thaw() {
	if p := a.current(); p != nil {
		p.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Kill kills the agent with SIGKILL, as in a crash, and waits for it to exit.
func (a *Agent) Kill() {
	p := a.current()
	if p == nil {
		return
	}
	p.cmd.Process.Kill()
	<-p.done
}

// Restart stops the agent if it is still running, starts it again with the
// same arguments, ports and data dir, and waits until it is ready. A -dev
// agent comes back empty; one with [WithDataDir] keeps its state.
func (a *Agent) Restart(t testing.TB) {
	t.Helper()
	a.stop()
	for try := 1; ; try++ {
		fmt.Fprintf(&a.out, "consultest: restarting\n")
		lostPort, err := a.run()
		if err == nil {
			return
		}
		// The ports are fixed now; one taken is most likely another test's
		// short-lived port probe, so wait it out.
		if try < startTries && lostPort {
			time.Sleep(500 * time.Millisecond)
			continue
		}
		t.Fatalf("consultest: restart consul agent %s: %v", a.node, err)
	}
}

func (a *Agent) newClient(hc *http.Client) *api.Client {
	if hc == nil {
		// Our own transport so CONSUL_* TLS settings from the environment do not leak in.
		hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	c, err := api.NewClient(&api.Config{Address: a.http, Scheme: "http", Token: a.token, HttpClient: hc})
	if err != nil {
		panic(err) // only fails on a malformed address or token file, neither possible here
	}
	return c
}

func (a *Agent) current() *process {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.proc
}

// run starts the agent and waits until it is ready. On failure it stops the
// agent again and reports whether the agent failed to bind one of its ports.
func (a *Agent) run() (lostPort bool, err error) {
	mark := a.out.Len()
	if err = a.launch(); err == nil {
		err = a.waitReady()
	}
	if err != nil {
		a.stop()
		out := a.out.From(mark)
		lostPort = strings.Contains(out, "address already in use") || strings.Contains(out, "bind: ")
	}
	return lostPort, err
}

func (a *Agent) launch() error {
	cmd := exec.Command(a.bin, a.args...)
	cmd.Stdout, cmd.Stderr = &a.out, &a.out
	cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1") // no update checks against the internet
	cmd.SysProcAttr = procAttr()
	cmd.WaitDelay = stopTimeout
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	a.mu.Lock()
	a.proc = p
	a.mu.Unlock()
	return nil
}

// stop ends the agent gracefully if it is still running, forcefully if it
// does not exit in time.
func (a *Agent) stop() {
	p := a.current()
	if p == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGCONT) // a frozen agent would never see the SIGTERM
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (a *Agent) waitReady() error {
	p := a.current()
	probe := a.newClient(&http.Client{Timeout: 2 * time.Second})
	deadline := time.Now().Add(readyTimeout)
	var last error
	for {
		select {
		case <-p.done:
			return fmt.Errorf("agent exited early (%v)", p.err)
		default:
		}
		if last = a.ready(probe); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %v", readyTimeout, last)
		}
		select {
		case <-p.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (a *Agent) ready(c *api.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	q := (&api.QueryOptions{}).WithContext(ctx)
	leader, err := c.Status().LeaderWithQueryOptions(q)
	if err != nil {
		return err
	}
	if leader == "" {
		return errors.New("no leader yet")
	}
	nodes, _, err := c.Catalog().Nodes(q)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n.Node == a.node {
			return nil
		}
	}
	return fmt.Errorf("node %s not in catalog yet", a.node)
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
)

// Consul is a `consul agent -dev` the harness owns: every port random on
// loopback, gRPC (plaintext) set explicitly so the peer mode can use
// Consul's own xDS server.
type Consul struct {
	HTTPAddr string
	GRPCAddr string
	Client   *api.Client
	cmd      *exec.Cmd
	done     chan struct{}
	logPath  string
	// requests counts the HTTP requests the harness itself made (writes),
	// so they are not confused with the server's.
	writes int
}

// StartConsul runs bin as a dev agent with extra HCL (may be empty) and
// waits until it has a leader and its node is registered.
func StartConsul(ctx context.Context, bin, dir, extraHCL string, cpus string) (*Consul, error) {
	ports := map[string]int{}
	var held []net.Listener
	for _, f := range []string{"http-port", "dns-port", "grpc-port", "grpc-tls-port", "serf-lan-port", "serf-wan-port", "server-port"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		held = append(held, l)
		ports[f] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range held {
		l.Close()
	}
	args := []string{"agent", "-dev", "-node", "bench-agent", "-bind", "127.0.0.1", "-client", "127.0.0.1", "-log-level", "warn"}
	for f, p := range ports {
		args = append(args, "-"+f, strconv.Itoa(p))
	}
	if extraHCL != "" {
		p := filepath.Join(dir, "consul-extra.hcl")
		if err := os.WriteFile(p, []byte(extraHCL), 0o600); err != nil {
			return nil, err
		}
		args = append(args, "-config-file", p)
	}
	c := &Consul{
		HTTPAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports["http-port"])),
		GRPCAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports["grpc-port"])),
		done:     make(chan struct{}),
		logPath:  filepath.Join(dir, "consul.log"),
	}
	logf, err := os.Create(c.logPath)
	if err != nil {
		return nil, err
	}
	c.cmd = pinned(cpus, bin, args...)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1")
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() { _ = c.cmd.Wait(); logf.Close(); close(c.done) }()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	c.Client, err = api.NewClient(&api.Config{Address: c.HTTPAddr, Scheme: "http", HttpClient: hc})
	if err != nil {
		c.Stop()
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := c.ready(); err == nil {
			return c, nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			c.Stop()
			return nil, fmt.Errorf("consul not ready: %v (log %s)", err, c.logPath)
		}
		select {
		case <-c.done:
			return nil, fmt.Errorf("consul exited early; see %s", c.logPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Consul) ready() error {
	leader, err := c.Client.Status().Leader()
	if err != nil {
		return err
	}
	if leader == "" {
		return errors.New("no leader")
	}
	nodes, _, err := c.Client.Catalog().Nodes(nil)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n.Node == "bench-agent" {
			return nil
		}
	}
	return errors.New("agent node not registered yet")
}

// PID of the agent process (its CPU and RSS are measured in peer mode).
func (c *Consul) PID() int { return c.cmd.Process.Pid }

// Stop ends the agent (SIGTERM, then SIGKILL after 5s).
func (c *Consul) Stop() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// World is the catalog the harness registers: Services × Instances, each
// instance on its own synthetic (external) node with one check that the
// harness flips, the catalog-side equivalent of a TTL check update.
type World struct {
	Services  int
	Instances int
}

// ServiceName is the name of service i.
func ServiceName(i int) string { return fmt.Sprintf("svc-%04d", i) }

// InstanceAddr is the IP and port of instance j of service i, unique
// across the world so a flip can be recognised in any EDS response.
func InstanceAddr(i, j int) (string, int) {
	n := i*1000 + j // < 2^24 for any sane world
	return fmt.Sprintf("10.%d.%d.%d", (n>>16)&0xff, (n>>8)&0xff, n&0xff), 8000 + j%1000
}

func nodeName(i, j int) string { return fmt.Sprintf("bench-node-%04d-%03d", i, j) }
func instanceID(i, j int) string {
	return fmt.Sprintf("%s-%03d", ServiceName(i), j)
}
func checkID(i, j int) string { return "ttl:" + instanceID(i, j) }

// maxTxnOps is Consul's limit per /v1/txn (128 in 1.15); stay under it.
const maxTxnOps = 120

func (c *Consul) txn(ctx context.Context, ops api.TxnOps) error {
	ok, resp, _, err := c.Client.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
	c.writes++
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("txn rolled back: %v", resp.Errors)
	}
	return nil
}

func instanceOps(i, j int, status string) api.TxnOps {
	addr, port := InstanceAddr(i, j)
	node := nodeName(i, j)
	return api.TxnOps{
		{Node: &api.NodeTxnOp{Verb: api.NodeSet, Node: api.Node{Node: node, Address: addr, Meta: map[string]string{"zone": "z1"}}}},
		{Service: &api.ServiceTxnOp{Verb: api.ServiceSet, Node: node, Service: api.AgentService{
			ID: instanceID(i, j), Service: ServiceName(i), Address: addr, Port: port,
		}}},
		checkOp(i, j, status),
	}
}

func checkOp(i, j int, status string) *api.TxnOp {
	return &api.TxnOp{Check: &api.CheckTxnOp{Verb: api.CheckSet, Check: api.HealthCheck{
		Node: nodeName(i, j), CheckID: checkID(i, j), Name: "ttl", Status: status,
		ServiceID: instanceID(i, j), ServiceName: ServiceName(i), Output: "bench",
	}}}
}

// RegisterWorld registers every instance, passing: the first native
// services through /v1/catalog/register as Connect-native (so Consul's own
// xDS server can route upstreams to them; /v1/txn drops the Connect
// block), the rest in batched transactions.
func (c *Consul) RegisterWorld(ctx context.Context, w World, native int) error {
	native = min(native, w.Services)
	if err := c.registerNative(ctx, native, w.Instances); err != nil {
		return err
	}
	return c.RegisterServices(ctx, native, w.Services, w.Instances)
}

func (c *Consul) registerNative(ctx context.Context, services, n int) error {
	errs := make(chan error, services*n)
	sem := make(chan struct{}, 16)
	for i := 0; i < services; i++ {
		for j := 0; j < n; j++ {
			sem <- struct{}{}
			go func() {
				defer func() { <-sem }()
				addr, port := InstanceAddr(i, j)
				_, err := c.Client.Catalog().Register(&api.CatalogRegistration{
					Node: nodeName(i, j), Address: addr, NodeMeta: map[string]string{"zone": "z1"},
					Service: &api.AgentService{
						ID: instanceID(i, j), Service: ServiceName(i), Address: addr, Port: port,
						Connect: &api.AgentServiceConnect{Native: true},
					},
					Checks: api.HealthChecks{{
						Node: nodeName(i, j), CheckID: checkID(i, j), Name: "ttl", Status: api.HealthPassing,
						ServiceID: instanceID(i, j), ServiceName: ServiceName(i), Output: "bench",
					}},
				}, (&api.WriteOptions{}).WithContext(ctx))
				errs <- err
			}()
		}
	}
	var first error
	for k := 0; k < services*n; k++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	c.writes += services * n
	return first
}

// RegisterServices registers services [from, to) with n instances each.
func (c *Consul) RegisterServices(ctx context.Context, from, to, n int) error {
	var ops api.TxnOps
	for i := from; i < to; i++ {
		for j := 0; j < n; j++ {
			ops = append(ops, instanceOps(i, j, api.HealthPassing)...)
			if len(ops)+3 > maxTxnOps {
				if err := c.txn(ctx, ops); err != nil {
					return err
				}
				ops = nil
			}
		}
	}
	if len(ops) > 0 {
		return c.txn(ctx, ops)
	}
	return nil
}

// DeregisterService removes service i's n instances (and their nodes).
func (c *Consul) DeregisterService(ctx context.Context, i, n int) error {
	var ops api.TxnOps
	for j := 0; j < n; j++ {
		ops = append(ops, &api.TxnOp{Node: &api.NodeTxnOp{Verb: api.NodeDelete, Node: api.Node{Node: nodeName(i, j)}}})
	}
	return c.txn(ctx, ops)
}

// SetHealth writes one instance's check status and returns when the write
// was sent (the start of the latency clock) and when it was committed.
func (c *Consul) SetHealth(ctx context.Context, i, j int, status string) (sent, committed time.Time, err error) {
	sent = time.Now()
	err = c.txn(ctx, api.TxnOps{checkOp(i, j, status)})
	return sent, time.Now(), err
}

// SetHealthMany flips several checks in one transaction.
func (c *Consul) SetHealthMany(ctx context.Context, ids [][2]int, status []string) error {
	var ops api.TxnOps
	for k, id := range ids {
		ops = append(ops, checkOp(id[0], id[1], status[k]))
	}
	return c.txn(ctx, ops)
}

// RegisterSidecars registers n connect-proxy services on the agent for
// peer mode: sidecar-K for app-K, each with upstreams to services
// [0, upstreams), or in the follow-one world to service K mod upstreams
// alone. Envoys connect with node.id = "sidecar-K".
func (c *Consul) RegisterSidecars(ctx context.Context, n, upstreams int, followOne bool, parallel int) error {
	errs := make(chan error, n)
	sem := make(chan struct{}, parallel)
	for k := 0; k < n; k++ {
		sem <- struct{}{}
		go func(k int) {
			defer func() { <-sem }()
			var ups []api.Upstream
			for _, u := range sidecarUpstreams(k, upstreams, followOne) {
				ups = append(ups, api.Upstream{DestinationName: ServiceName(u), LocalBindPort: 20000 + u})
			}
			reg := &api.AgentServiceRegistration{
				Kind: api.ServiceKindConnectProxy, ID: SidecarID(k), Name: fmt.Sprintf("app-%d-sidecar-proxy", k),
				Address: "127.0.0.1", Port: 21000,
				Proxy: &api.AgentServiceConnectProxyConfig{
					DestinationServiceName: fmt.Sprintf("app-%d", k), LocalServiceAddress: "127.0.0.1", LocalServicePort: 8080,
					Upstreams: ups,
				},
			}
			errs <- c.Client.Agent().ServiceRegisterOpts(reg, api.ServiceRegisterOpts{}.WithContext(ctx))
		}(k)
	}
	var first error
	for k := 0; k < n; k++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// SidecarID is the proxy service id (and Envoy node.id) of sidecar k.
func SidecarID(k int) string { return fmt.Sprintf("sidecar-%d", k) }

// pinned runs name under taskset when cpus is set, so the server under
// test and the load generator do not steal each other's cores.
func pinned(cpus, name string, args ...string) *exec.Cmd {
	if cpus == "" {
		return exec.Command(name, args...)
	}
	if ts, err := exec.LookPath("taskset"); err == nil {
		return exec.Command(ts, append([]string{"-c", cpus, name}, args...)...)
	}
	return exec.Command(name, args...)
}

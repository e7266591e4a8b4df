package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// rpcName is epoch's hot restart socket: in the abstract namespace when
// --socket-path starts with "@", as Envoy's does; one per base id and
// epoch, so Envoys with different base ids never meet.
func rpcName(o *options, epoch int) string {
	return fmt.Sprintf("%s_%d_%d", o.socketPath, o.baseID, epoch)
}

type rpcMsg struct {
	Request string `json:"request,omitempty"`
	OK      bool   `json:"ok,omitempty"`
	Error   string `json:"error,omitempty"`
	HasFD   bool   `json:"has_fd,omitempty"`
	// Version is the sender's hot restart compatibility version: a parent
	// refuses a child of another one (they cannot share the protocol).
	Version string `json:"version,omitempty"`
}

// parentConn is the child's side of the RPC with its parent epoch.
type parentConn struct {
	c  *net.UnixConn
	fd int // the last passed socket, -1 if none
}

func dialParent(o *options) (*parentConn, error) {
	addr := &net.UnixAddr{Name: rpcName(o, o.epoch-1), Net: "unixpacket"}
	// The parent may still be binding its socket (it was started just
	// before); Envoy retries its connect as well.
	var err error
	for i := 0; i < 20; i++ {
		var c *net.UnixConn
		if c, err = net.DialUnix("unixpacket", nil, addr); err == nil {
			return &parentConn{c: c, fd: -1}, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("hot restart: unable to connect to the parent (epoch %d) at %s: %w; an epoch > 0 needs its parent running", o.epoch-1, addr.Name, err)
}

func (p *parentConn) call(req string) error {
	b, _ := json.Marshal(rpcMsg{Request: req, Version: hotRestartVersion})
	if _, err := p.c.Write(b); err != nil {
		return err
	}
	buf, oob := make([]byte, 4096), make([]byte, syscall.CmsgSpace(4))
	n, oobn, _, _, err := p.c.ReadMsgUnix(buf, oob)
	if err != nil {
		return err
	}
	var m rpcMsg
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		return err
	}
	if m.Error != "" {
		return fmt.Errorf("%s", m.Error)
	}
	p.fd = -1
	if m.HasFD && oobn > 0 {
		msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) == 0 {
			return fmt.Errorf("no socket passed: %v", err)
		}
		fds, err := syscall.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) == 0 {
			return fmt.Errorf("no socket passed: %v", err)
		}
		p.fd = fds[0]
	}
	return nil
}

func (p *parentConn) close() { _ = p.c.Close() }

// listenRPC serves this epoch's hot restart socket for its child.
func (e *envoy) listenRPC() error {
	name := rpcName(e.o, e.o.epoch)
	file := !strings.HasPrefix(name, "@")
	if file {
		_ = os.Remove(name) // as Envoy: a stale socket file of a crashed epoch
	}
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: name, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("hot restart: unable to bind the domain socket %s: %w (another Envoy with this base id and epoch?)", name, err)
	}
	if file {
		mode, _ := strconv.ParseUint(e.o.socketMode, 8, 32)
		if err := os.Chmod(name, os.FileMode(mode)); err != nil {
			l.Close()
			return fmt.Errorf("hot restart: socket mode of %s: %w", name, err)
		}
	}
	go func() {
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			go e.serveChild(c)
		}
	}()
	return nil
}

func (e *envoy) serveChild(c *net.UnixConn) {
	defer c.Close()
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		var m rpcMsg
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			return
		}
		reply, oob := rpcMsg{OK: true}, []byte(nil)
		if m.Version != hotRestartVersion {
			_, _, _ = c.WriteMsgUnix(mustJSON(rpcMsg{Error: fmt.Sprintf("hot restart version mismatch: parent %s, child %s", hotRestartVersion, m.Version)}), nil, nil)
			return
		}
		switch m.Request {
		case "shutdown_admin":
			e.shutdownAdmin()
		case "pass_listen_socket":
			e.mu.Lock()
			l := e.traffic
			e.mu.Unlock()
			if tl, ok := l.(*net.TCPListener); ok {
				if f, err := tl.File(); err == nil {
					defer f.Close()
					oob, reply.HasFD = syscall.UnixRights(int(f.Fd())), true
				}
			}
		case "drain_listeners":
			e.record("hot_restart_drain", nil)
			e.drain(false)
		case "terminate":
			e.record("terminated_by_child", nil)
			_, _, _ = c.WriteMsgUnix(mustJSON(reply), nil, nil)
			e.quit <- "terminated by the child epoch"
			return
		default:
			reply = rpcMsg{Error: "unknown request " + m.Request}
		}
		if _, _, err := c.WriteMsgUnix(mustJSON(reply), oob, nil); err != nil {
			return
		}
	}
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

// takeListeners opens --x-fake-listen: a copy of the parent's socket when
// there is a parent (Envoy asks for copies of the listen sockets), else
// bound fresh.
func (e *envoy) takeListeners(parent *parentConn) error {
	if e.o.listen == "" {
		return nil
	}
	var l net.Listener
	var err error
	if parent != nil {
		if err := parent.call("pass_listen_socket"); err != nil {
			return err
		}
		if parent.fd >= 0 {
			f := os.NewFile(uintptr(parent.fd), "listener")
			l, err = net.FileListener(f)
			_ = f.Close()
		}
	}
	if l == nil && err == nil {
		l, err = net.Listen("tcp", e.o.listen)
	}
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.traffic = l
	e.mu.Unlock()
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		e.mu.Lock()
		d := e.draining
		e.mu.Unlock()
		if d {
			w.Header().Set("Connection", "close") // encouraged to drain
		}
		fmt.Fprintf(w, "epoch %d pid %d\n", e.o.epoch, e.pid)
	})}
	go func() { _ = srv.Serve(l) }()
	e.record("listening", map[string]any{"addr": l.Addr().String()})
	return nil
}

// drain starts draining: connections are discouraged at once; a graceful
// drain keeps accepting for --drain-time-s, otherwise listeners stop
// accepting now.
func (e *envoy) drain(graceful bool) {
	e.mu.Lock()
	e.draining = true
	l := e.traffic
	e.mu.Unlock()
	if l == nil {
		return
	}
	if !graceful {
		_ = l.Close()
		return
	}
	time.AfterFunc(time.Duration(e.o.drainTime)*time.Second, func() { _ = l.Close(); e.record("listeners_closed", nil) })
}

// initialize connects ADS as the bootstrap says and returns once the
// first clusters and listeners are accepted (Envoy's initial fetch).
func (e *envoy) initialize() error {
	ads := e.bs.GetDynamicResources().GetAdsConfig()
	if ads == nil || len(ads.GetGrpcServices()) == 0 {
		return fmt.Errorf("no ads_config")
	}
	name := ads.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName()
	var addr string
	for _, c := range e.bs.GetStaticResources().GetClusters() {
		if c.GetName() != name {
			continue
		}
		for _, lle := range c.GetLoadAssignment().GetEndpoints() {
			for _, ep := range lle.GetLbEndpoints() {
				a := ep.GetEndpoint().GetAddress()
				if p := a.GetPipe(); p != nil && addr == "" {
					addr = "unix://" + p.GetPath()
				} else if sa := a.GetSocketAddress(); sa != nil && addr == "" {
					addr = net.JoinHostPort(sa.GetAddress(), fmt.Sprint(sa.GetPortValue()))
				}
			}
		}
	}
	if addr == "" {
		return fmt.Errorf("ads cluster %q has no endpoint", name)
	}
	mode := adsclient.SotW
	if ads.GetApiType().String() == "DELTA_GRPC" {
		mode = adsclient.Delta
	}
	node := e.bs.GetNode()
	meta := map[string]string{}
	for k, v := range node.GetMetadata().GetFields() {
		meta[k] = v.GetStringValue()
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := adsclient.Dial(ctx, adsclient.Config{Addr: addr, NodeID: node.GetId(), Cluster: node.GetCluster(), Metadata: meta, Mode: mode})
		if err == nil {
			_, err = c.Wait(ctx, func(s adsclient.State) bool {
				_, cds := s.Types[resource.ClusterType]
				_, lds := s.Types[resource.ListenerType]
				return cds && lds
			})
		}
		cancel()
		if err == nil {
			e.record("initial_fetch_done", nil)
			return nil // the stream stays open, as Envoy's does
		}
		if c != nil {
			_ = c.Close()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

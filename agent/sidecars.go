package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
)

// Connect sidecars through the agent. A sidecar Envoy is known by its node
// id (the connect-proxy's service id, as Consul's own xDS server knows
// it), and the same id (web-sidecar-proxy) is registered on every VM
// running web, so the central bridge needs the Consul node too. The agent
// knows both: it follows the local Consul agent's connect-proxy
// registrations, keys local sidecars to their group
// (sidecar:NODE/PROXY-ID) as the central bridge does, and relays each
// with the proxy's own id and node metadata consul_node, so the central
// bridge serves it that registration's listeners and clusters while the
// leaf and its key stay on the VM (served here over SDS).

// SidecarPoll is how often the local agent's registrations are read: a
// local call, cheap, and /v1/agent/services has no blocking form.
const SidecarPoll = 2 * time.Second

// sidecarsFile, in the data directory, keeps the last registrations read,
// so an agent restarting while its Consul agent is down keys its sidecars
// at once and serves them their last good config.
const sidecarsFile = "sidecars.json"

// sidecarStartWait bounds how long local streams wait for the first read
// when nothing is saved: after it they are served by node.cluster (and
// re-keyed once the registrations are read).
const sidecarStartWait = 10 * time.Second

type localSidecars struct {
	a *Agent

	mu    sync.Mutex
	node  string                         // the local Consul node's name
	index map[string][]serve.SidecarInfo // by proxy id
	set   bool
	// Read's goroutine only: proxy ids whose service is not a connect
	// service, logged; the client; the node name Consul gave this process.
	warned   map[string]bool
	client   *api.Client
	liveNode string
}

// sidecarFile is where the registrations are kept.
func (s *localSidecars) file() string { return filepath.Join(s.a.cfg.DataDir, sidecarsFile) }

// savedSidecars is the file's form: its own, since serve.SidecarInfo's
// JSON is /v1/proxies' (which leaves the group out).
type savedSidecars struct {
	Node    string         `json:"node"`
	Proxies []savedSidecar `json:"proxies"`
}

type savedSidecar struct {
	ProxyID   string   `json:"proxy_id"`
	Group     string   `json:"group"`
	Service   string   `json:"service"`
	Upstreams []string `json:"upstreams,omitempty"`
	Kind      string   `json:"kind,omitempty"` // a gateway's
}

func toSaved(node string, index map[string][]serve.SidecarInfo) savedSidecars {
	out := savedSidecars{Node: node, Proxies: []savedSidecar{}}
	for _, id := range slices.Sorted(maps.Keys(index)) {
		for _, in := range index[id] {
			out.Proxies = append(out.Proxies, savedSidecar{ProxyID: id, Group: in.Group(id), Service: in.Service, Upstreams: in.Upstreams, Kind: in.Kind})
		}
	}
	return out
}

func (s savedSidecars) index() map[string][]serve.SidecarInfo {
	index := map[string][]serve.SidecarInfo{}
	for _, p := range s.Proxies {
		index[p.ProxyID] = append(index[p.ProxyID], serve.SidecarInfo{Node: s.Node, Service: p.Service, Upstreams: p.Upstreams, Kind: p.Kind})
	}
	return index
}

// restore applies the saved registrations, if any.
func (s *localSidecars) restore() bool {
	b, err := policy.ReadBoundedFile(context.Background(), s.file(), maxStateBytes)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.a.log.Warn().Err(err).Msg("cannot read the saved sidecar registrations; waiting for the local Consul agent")
		}
		return false
	}
	var saved savedSidecars
	if err := json.Unmarshal(b, &saved); err != nil || saved.Proxies == nil || slices.ContainsFunc(saved.Proxies, func(p savedSidecar) bool {
		return p.ProxyID == "" || p.Group != ir.SidecarGroupName(saved.Node, p.ProxyID)
	}) {
		s.a.log.Warn().Str("file", s.file()).Msg("ignoring a damaged sidecar registrations file")
		return false
	}
	s.apply(saved.Node, saved.index(), false, false)
	return true
}

func (s *localSidecars) run(ctx context.Context) {
	if !s.restore() {
		go func() {
			select {
			case <-ctx.Done():
			case <-time.After(sidecarStartWait):
				if s.apply("", map[string][]serve.SidecarInfo{}, false, true) {
					s.a.log.Warn().Msg("no Connect sidecar registrations read from the local Consul agent yet; local proxies are served by node.cluster until they are")
				}
			}
		}()
	}
	backoff := s.a.cfg.BackoffInitial
	for ctx.Err() == nil {
		wait := SidecarPoll
		if err := s.read(ctx); err != nil {
			s.a.log.Warn().Err(err).Msg("cannot read the local Consul agent's sidecar registrations; local sidecars keep their group")
			wait, backoff = backoff, min(2*backoff, s.a.cfg.BackoffMax)
		} else {
			backoff = s.a.cfg.BackoffInitial
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// read takes the local agent's connect-proxy registrations. The node
// name is asked once per process (never taken from the saved file, so a
// renamed node is picked up), through one client kept for the polls.
func (s *localSidecars) read(ctx context.Context) error {
	if s.client == nil {
		cl, err := s.a.consul.get()
		if err != nil {
			return err
		}
		s.client = cl
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // a local call: a hung agent must not hold the poll
	defer cancel()
	q := (&api.QueryOptions{}).WithContext(ctx)
	if s.liveNode == "" {
		self, err := s.client.Agent().Self()
		if err != nil {
			return fmt.Errorf("local Consul node name: %w", err)
		}
		name, _ := self["Config"]["NodeName"].(string)
		if name == "" {
			return fmt.Errorf("local Consul node name: the agent's /v1/agent/self has no Config.NodeName")
		}
		s.liveNode = name
	}
	node := s.liveNode
	services, err := s.client.Agent().ServicesWithFilterOpts(`Kind == "connect-proxy" or Kind == "terminating-gateway" or Kind == "mesh-gateway"`, q)
	if err != nil {
		return fmt.Errorf("local connect-proxy registrations: %w", err)
	}
	index := map[string][]serve.SidecarInfo{}
	for _, id := range slices.Sorted(maps.Keys(services)) {
		svc := services[id]
		if svc.Kind != api.ServiceKindConnectProxy {
			info, err := s.gateway(node, id, svc, q) // gateways.go
			if err != nil {
				return err
			}
			index[id] = []serve.SidecarInfo{info}
			continue
		}
		if svc.Proxy == nil || svc.Proxy.DestinationServiceName == "" {
			continue
		}
		info := serve.SidecarInfo{Node: node, Service: svc.Proxy.DestinationServiceName}
		for _, u := range svc.Proxy.Upstreams {
			info.Upstreams = append(info.Upstreams, fmt.Sprintf("%s@%s:%d", u.DestinationName, u.LocalBindAddress, u.LocalBindPort))
		}
		if !slices.Contains(s.a.cfg.ConnectServices, info.Service) && !s.warned[id] {
			s.warned[id] = true // once per proxy id, not every poll
			s.a.log.Warn().Str("proxy_id", id).Str("service", info.Service).
				Msg("a local Connect sidecar's service is not in connect.services, so the agent serves it no leaf certificate; add it")
		}
		index[id] = []serve.SidecarInfo{info}
	}
	s.apply(node, index, true, false)
	return nil
}

// apply installs an index (closing local streams it re-keys) and, when
// it came from Consul and changed, saves it; onlyIfUnset (the start-up
// fallback) applies it only if nothing has been. It reports whether it
// installed the index. The server is told under s.mu, so two applies
// reach it in the order they hold the index here.
func (s *localSidecars) apply(node string, index map[string][]serve.SidecarInfo, save, onlyIfUnset bool) bool {
	s.mu.Lock()
	if onlyIfUnset && s.set {
		s.mu.Unlock()
		return false
	}
	same := s.set && s.node == node && serve.SameSidecarIndex(s.index, index)
	s.node, s.index, s.set = node, index, true
	if !same {
		s.a.server.SetSidecars(index)
	}
	s.mu.Unlock()
	if !same {
		// A sidecar group's service may have changed: who may act for it
		// and what its key is served (its leaf) follow, in that order, so
		// a stream admitted for the old service ends before the new
		// service's leaf is served to its key.
		s.a.gate.recheck()
		s.a.reserveAll()
	}
	if same || !save {
		return !same
	}
	b, err := json.Marshal(toSaved(node, index))
	if err == nil {
		if err = os.MkdirAll(s.a.cfg.DataDir, 0o700); err == nil {
			err = writeFileAtomic(s.file(), b)
		}
	}
	if err != nil {
		s.a.log.Warn().Err(err).Msg("cannot save the sidecar registrations; a restart without the local Consul agent waits for it")
	}
	return true
}

// upstreamNode is who a relay of key announces itself as to the central
// bridge: for a sidecar group, the proxy's own id, its service as
// node.cluster (what Consul's bootstrap announces, and what
// authorize_nodes checks) and its Consul node; otherwise the agent's
// node id and the key's node.cluster. ok is false for a sidecar group
// no local registration has (any more): nothing to relay it as.
func (a *Agent) upstreamNode(k serve.RelayKey) (id, cluster string, meta map[string]string, ok bool) {
	if !strings.HasPrefix(k.NodeCluster, ir.SidecarGroupPrefix) || a.sidecars == nil {
		return a.cfg.NodeID, k.NodeCluster, nil, true
	}
	s := a.sidecars
	s.mu.Lock()
	defer s.mu.Unlock()
	for proxyID, infos := range s.index {
		for _, info := range infos {
			if info.Group(proxyID) == k.NodeCluster {
				return proxyID, info.Service, map[string]string{xds.ConsulNodeMetadata: info.Node}, true
			}
		}
	}
	return "", "", nil, false
}

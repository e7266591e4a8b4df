package cache

import (
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/envoycompat"
)

// Snapshot keys: what a node is served is decided by its key, its
// node.cluster (rewritten to its group for a Connect sidecar by package
// serve's sidecar.go), marked for proxyless gRPC clients, and followed by
// the version class of an Envoy older than the newest feature
// (envoycompat.Class), so that Envoys of one class share one rewritten
// copy and nodes of the newest, or announcing no version, are keyed as
// before.

// proxylessKey prefixes the snapshot key of proxyless gRPC clients, so a
// gRPC client and an Envoy announcing the same node.cluster get different
// listeners (API listeners vs. real ones). The separator cannot appear in
// a sensible node.cluster.
const proxylessKey = "grpc\x1f"

// classSep separates a key's node.cluster from its Envoy version class;
// like proxylessKey's separator, no sensible node.cluster holds it.
const classSep = "\x1e"

// Key is the cache key of a node: its node.cluster, marked for
// proxyless gRPC clients (user agent "gRPC ..." / "grpc-go").
func Key(node *corev3.Node) string {
	k := builtKey{cluster: node.GetCluster(), proxyless: isProxyless(node)}
	if !k.proxyless {
		if k.class = envoycompat.ClassOfNode(node); k.class.Current() {
			return k.cluster
		}
	}
	return k.key()
}

// builtKey is what a key other than the node.cluster itself is built
// from. Key runs for every request in several places (the tracker, the
// callbacks, the cache's open, the served-keys check), and building such
// a key each time made tiny strings by the tens per proxy at a fleet's
// connect, garbage scattered among the small objects the streams keep
// (bench/README.md, "Where a storm's memory stays"). So built keys are
// interned: up to maxBuiltKeys of them, of node.clusters up to
// maxInternedCluster bytes (clients choose their node.cluster: beyond
// either bound a key is built as before, at most ~1 MiB kept).
type builtKey struct {
	cluster   string
	class     envoycompat.Class
	proxyless bool
}

const (
	maxBuiltKeys       = 4096
	maxInternedCluster = 256
)

var builtKeys = struct {
	sync.Mutex
	m map[builtKey]string
}{m: map[builtKey]string{}}

func (k builtKey) key() string {
	builtKeys.Lock()
	s, ok := builtKeys.m[k]
	builtKeys.Unlock()
	if ok {
		return s
	}
	if k.proxyless {
		s = proxylessKey + k.cluster
	} else {
		s = k.cluster + classSep + k.class.String()
	}
	if len(k.cluster) <= maxInternedCluster {
		builtKeys.Lock()
		if len(builtKeys.m) < maxBuiltKeys {
			builtKeys.m[k] = s
		}
		builtKeys.Unlock()
	}
	return s
}

// isProxyless runs on every request: no lower-cased copy of the agent.
func isProxyless(node *corev3.Node) bool {
	ua := node.GetUserAgentName()
	return len(ua) >= 4 && strings.EqualFold(ua[:4], "grpc")
}

// ParseKey is the node.cluster a key was made from, and whether its node
// is a proxyless gRPC client.
func ParseKey(key string) (nodeCluster string, proxyless bool) {
	nodeCluster, proxyless = strings.CutPrefix(key, proxylessKey)
	nodeCluster, _, _ = strings.Cut(nodeCluster, classSep)
	return nodeCluster, proxyless
}

// KeyClass is the Envoy version class a key is served as: the current
// class (no rewrite) for a key without one.
func KeyClass(key string) envoycompat.Class {
	_, c, ok := strings.Cut(key, classSep)
	if !ok {
		return envoycompat.Class{}
	}
	return envoycompat.ParseClass(c)
}

// BaseKey is key without its version class: the key its node.cluster
// has for an Envoy of the newest version.
func BaseKey(key string) string {
	base, _, _ := strings.Cut(key, classSep)
	return base
}

// ProxylessKey is the key proxyless gRPC clients announcing nodeCluster
// are served under: ConfigDump("", ProxylessKey(nc)) is what they get.
func ProxylessKey(nodeCluster string) string { return proxylessKey + nodeCluster }

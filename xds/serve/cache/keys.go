package cache

import (
	"strings"

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
	if isProxyless(node) {
		return proxylessKey + node.GetCluster()
	}
	if c := envoycompat.ClassOfNode(node); !c.Current() {
		return node.GetCluster() + classSep + c.String()
	}
	return node.GetCluster()
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

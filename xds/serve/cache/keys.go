package cache

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// Snapshot keys: what a node is served is decided by its key, its
// node.cluster (rewritten to its group for a Connect sidecar by package
// serve's sidecar.go), marked for proxyless gRPC clients.

// proxylessKey prefixes the snapshot key of proxyless gRPC clients, so a
// gRPC client and an Envoy announcing the same node.cluster get different
// listeners (API listeners vs. real ones). The separator cannot appear in
// a sensible node.cluster.
const proxylessKey = "grpc\x1f"

// Key is the cache key of a node: its node.cluster, marked for
// proxyless gRPC clients (user agent "gRPC ..." / "grpc-go").
func Key(node *corev3.Node) string {
	if isProxyless(node) {
		return proxylessKey + node.GetCluster()
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
	return strings.CutPrefix(key, proxylessKey)
}

// ProxylessKey is the key proxyless gRPC clients announcing nodeCluster
// are served under: ConfigDump("", ProxylessKey(nc)) is what they get.
func ProxylessKey(nodeCluster string) string { return proxylessKey + nodeCluster }

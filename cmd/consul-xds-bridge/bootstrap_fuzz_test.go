package main

import (
	"bytes"
	"testing"
)

// FuzzBootstrapFlags: bootstrap with any -xds address, node id, cluster
// and Consul node writes a bootstrap or refuses with exit 1 or 2, never a
// panic (addresses are parsed for scheme, host, port and Unix paths).
func FuzzBootstrapFlags(f *testing.F) {
	f.Add("127.0.0.1:18000", "web-1", "web", "")
	f.Add("grpcs://bridge.internal:18000", "edge-1", "edge", "vm-a")
	f.Add("unix:///run/consul-xds-bridge/agent.sock", "x", "*", "")
	f.Add("dns:///bridge:18000", "", "", "")
	f.Add("[::1]:18000", "n", "c", "n")
	f.Fuzz(func(t *testing.T, addr, node, cluster, consulNode string) {
		var out, errOut bytes.Buffer
		args := []string{"bootstrap", "-xds", addr, "-node-id", node, "-cluster", cluster}
		if consulNode != "" {
			args = append(args, "-consul-node", consulNode)
		}
		if code := realMain(args, &out, &errOut); code != 0 && code != 1 && code != 2 {
			t.Fatalf("exit %d for %q:\n%s", code, args, errOut.String())
		}
	})
}

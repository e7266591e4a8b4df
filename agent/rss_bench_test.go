package agent_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/modroot"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/procstat"
	"github.com/consul-xds-bridge/consul-xds-bridge/internal/syncbuffer"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds/adsclient"
)

// BenchmarkAgentProcessRSS measures what an agent costs a VM: the VmRSS
// of the real `consul-xds-bridge agent` process relaying a world of 50
// services × 20 instances (every group routes all 50) from a central
// bridge to 3 local proxies, once with the 3 in one group (one relayed
// copy of the world) and once each in its own group (three copies).
// docs/scaling.md's agent memory and sizing quote it:
//
//	CI=true CONSUL_BIN=$PWD/.tools/bin/consul go test ./agent -run XXX -bench AgentProcessRSS -benchtime 1x
//
// Reported: rss-MiB with the proxies in full state, and base-MiB, the
// same process before any proxy connected (its upstream streams open
// only for a local proxy's group).
func BenchmarkAgentProcessRSS(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "consul-xds-bridge")
	build := exec.Command("go", "build", "-o", bin, "./cmd/consul-xds-bridge")
	build.Dir = modroot.Dir()
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	const services, instances = 50, 20
	ca := consultest.Start(b)
	for s := range services {
		for i := range instances {
			ca.RegisterTTL(b, fmt.Sprintf("svc-%02d", s), fmt.Sprintf("svc-%02d-%d", s, i), 20000+s*instances+i, nil, nil)
		}
	}
	_, central := startCentralWithPolicy(b, ca, worldPolicy(b, services, "edge-a", "edge-b", "edge-c"))
	for _, tc := range []struct {
		name     string
		clusters []string
	}{
		{"one-group", []string{"edge-a", "edge-a", "edge-a"}},
		{"three-groups", []string{"edge-a", "edge-b", "edge-c"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				base, rss := agentRSS(b, bin, central, tc.clusters, services, instances)
				b.ReportMetric(float64(base)/(1<<20), "base-MiB")
				b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
			}
		})
	}
}

// worldPolicy routes every service from one listener in each group.
func worldPolicy(b *testing.B, services int, groups ...string) string {
	var hcl strings.Builder
	for _, g := range groups {
		fmt.Fprintf(&hcl, "proxy %q {\n  listener \"http\" {\n    port = 8080\n    virtual_host \"all\" {\n      domains = [\"*\"]\n", g)
		for s := range services {
			fmt.Fprintf(&hcl, "      route {\n        match {\n          path_prefix = \"/svc-%02d/\"\n        }\n        service = \"svc-%02d\"\n      }\n", s, s)
		}
		hcl.WriteString("    }\n  }\n}\n")
	}
	file := filepath.Join(b.TempDir(), "policy.hcl")
	if err := os.WriteFile(file, []byte(hcl.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return file
}

// agentRSS runs the agent binary against central, connects a proxy of
// each cluster to its socket, waits until each holds every service's
// endpoints, and returns the process's VmRSS before the proxies and then.
func agentRSS(b *testing.B, bin, central string, clusters []string, services, instances int) (base, rss int64) {
	dir := b.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	cfg := filepath.Join(dir, "agent.hcl")
	src := fmt.Sprintf(`node_id = "vm-1"
data_dir = %q
allow_groups = ["edge-*"]
listen {
  socket = %q
}
upstream {
  addresses = [%q]
}
`, filepath.Join(dir, "data"), sock, central)
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		b.Fatal(err)
	}
	var logs syncbuffer.Buffer
	cmd := exec.Command(bin, "agent", "-config", cfg)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the agent did not open its socket:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // past its start-up allocations
	base = processRSS(b, cmd.Process.Pid)
	for _, c := range clusters {
		p := dial(b, "unix://"+sock, c, adsclient.Delta)
		wait(b, p, "the world through the agent", 60*time.Second, func(s adsclient.State) bool {
			for svc := range services {
				if len(s.Endpoints(fmt.Sprintf("svc-%02d", svc))) != instances {
					return false
				}
			}
			return true
		})
	}
	time.Sleep(time.Second) // the ACKs and anything still in flight
	return base, processRSS(b, cmd.Process.Pid)
}

// processRSS is a process's VmRSS in bytes.
func processRSS(b *testing.B, pid int) int64 {
	n, err := procstat.RSS(pid)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

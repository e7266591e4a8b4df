package bench

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestAgentTierSockets: startAgents runs m real agents, each on a socket
// of its own, and proxy k goes to agent k/K: the fleet's first K proxies
// share the first agent, the next K the second.
func TestAgentTierSockets(t *testing.T) {
	tier, err := startAgents(context.Background(), t.TempDir(), 3, []string{"127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.stop()
	if len(tier.sockets) != 3 {
		t.Fatalf("%d sockets, want 3", len(tier.sockets))
	}
	for _, s := range tier.sockets {
		if fi, err := os.Stat(strings.TrimPrefix(s, "unix://")); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Errorf("agent socket %s: %v %v", s, fi, err)
		}
	}
	addr := tier.addrOf(2)
	for k, want := range []int{0, 0, 1, 1, 2, 2, 0} {
		if got := addr(k); got != tier.sockets[want] {
			t.Errorf("proxy %d goes to %s, want agent %d's %s", k, got, want, tier.sockets[want])
		}
	}
	if _, err := startAgents(context.Background(), t.TempDir(), 0, nil); err == nil {
		t.Error("a tier of 0 agents started")
	}
}

// TestAgentsApart: with AgentsNice the agents run in a process of their
// own at that niceness, listening where addrOf sends the proxies; the
// load generator's CPU counts that process too, and stop ends it.
func TestAgentsApart(t *testing.T) {
	dir := t.TempDir()
	o := &Options{Self: os.Args[0], AgentsNice: "7"}
	tier, err := startAgentsProcess(o, dir, 2, []string{"127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			tier.stop()
		}
	}()
	pid := tier.pid()
	if pid == 0 || pid == os.Getpid() {
		t.Fatalf("agents process %d", pid)
	}
	for _, s := range []string{tier.addrOf(3)(0), tier.addrOf(3)(3)} {
		if fi, err := os.Stat(strings.TrimPrefix(s, "unix://")); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Errorf("agent socket %s: %v %v", s, fi, err)
		}
	}
	if nice, err := ProcNice(pid); err != nil || nice != 7 {
		t.Errorf("agents process runs at niceness %d (%v), want 7", nice, err)
	}
	tier.stop()
	stopped = true
	if tier.proc.ProcessState == nil || !tier.proc.ProcessState.Success() {
		t.Errorf("agents process after stop: %v", tier.proc.ProcessState)
	}
}

// TestGenCPUCountsTheAgents: the load generator's CPU is this process's
// plus, when the agents run apart, theirs (here a process that has
// burnt a known amount: /proc counts in 10 ms ticks).
func TestGenCPUCountsTheAgents(t *testing.T) {
	busy := exec.Command("sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; exec sleep 30`)
	if err := busy.Start(); err != nil {
		t.Skip("no sh:", err)
	}
	defer func() { _ = busy.Process.Kill(); _ = busy.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for ProcCPU(busy.Process.Pid) < 0.1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	other := ProcCPU(busy.Process.Pid)
	if other < 0.1 {
		t.Fatalf("the busy process used %.2fs", other)
	}
	r := &run{tier: &agentTier{proc: busy}}
	self := ProcCPU(os.Getpid())
	if got := r.genCPU(); got < self+other {
		t.Errorf("load generator CPU %.2fs, want at least this process's %.2fs plus the agents' %.2fs", got, self, other)
	}
	if got := (&run{}).genCPU(); got > ProcCPU(os.Getpid()) {
		t.Errorf("without an agents process: %.2fs, more than this process's own", got)
	}
}

// TestAgentsApartRefusesANicenessNotGot: nice(1) runs its command anyway
// at another niceness when it cannot set the one asked for (here past the
// top, 19; below 0 without root alike); the run says so and stops
// instead of measuring without the priority it claims.
func TestAgentsApartRefusesANicenessNotGot(t *testing.T) {
	_, err := startAgentsProcess(&Options{Self: os.Args[0], AgentsNice: "25"}, t.TempDir(), 1, []string{"127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "not 25") {
		t.Fatalf("asked for niceness 25: %v, want a refusal naming it", err)
	}
}

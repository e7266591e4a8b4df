package bridge_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/consultest"
)

// capKB bounds a hostile test's bridge process: far above a healthy
// bridge (tens of MB), far below what would hurt the machine.
const capKB = 1 << 20 // 1 GiB

// TestPlanNamesHostileFiles posts documents to /v1/plan that name
// /dev/zero, a FIFO, a 1 GiB file, /etc/shadow and a path that does not
// exist. The bridge reads none of them: its RSS stays under twice its
// idle RSS, a health flip reaches a proxy within 1s meanwhile, and the
// answer is the same for every path (no oracle for the bridge's disk).
func TestPlanNamesHostileFiles(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	b := startBridgeProcess(t, agent, "export_all_services = true\n", capKB)
	f := newFlipper(t, agent, b.xds)

	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.pem")
	bf, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := bf.Truncate(1 << 30); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	bf.Close()
	doc := func(path string) string {
		return fmt.Sprintf("service \"web\" {\n  tls {\n    ca_file = %q\n  }\n}\n", path)
	}
	// Warm up (one plan's allocations), then take the idle RSS.
	if code, body := b.plan("warm.hcl", "export_all_services = true\n", 10*time.Second); code != http.StatusOK {
		t.Fatalf("a benign plan = %d: %s", code, body)
	}
	time.Sleep(500 * time.Millisecond)
	idle := b.rss()
	t.Logf("idle RSS %d kB", idle)

	answers := map[string]string{}
	missing := filepath.Join(dir, "missing.pem")
	// The disk-oracle pair first, the ones that cost memory or hang last.
	for _, path := range []string{missing, "/etc/shadow", fifo, big, "/dev/zero"} {
		done := make(chan struct{})
		var code int
		var body string
		go func() {
			defer close(done)
			code, body = b.plan("hostile.hcl", doc(path), 15*time.Second)
		}()
		f.flip(t, "plan naming "+path)
		<-done
		if code != http.StatusUnprocessableEntity || !strings.Contains(body, "File not read by the admin API") {
			t.Errorf("plan naming %s = %d, want 422 saying the file is not read: %.300s", path, code, body)
		}
		answers[path] = strings.ReplaceAll(body, path, "PATH")
		f.flip(t, "after the plan naming "+path)
	}
	first := answers[missing]
	for path, a := range answers {
		if a != first {
			t.Errorf("the answer for %s differs from a missing file's: the plan tells about the bridge's disk\n%.300s\n---\n%.300s", path, a, first)
		}
	}
	if b.killedForRSS.Load() {
		t.Fatalf("the bridge process passed %d kB and was killed", capKB)
	}
	if peak := b.maxRSS.Load(); peak >= 2*idle {
		t.Errorf("peak RSS %d kB, want under twice idle (%d kB)", peak, idle)
	} else {
		t.Logf("peak RSS %d kB (idle %d kB)", peak, idle)
	}
}

// TestConcurrentSlowPlans: 8 clients post documents that take HCL
// seconds to parse, and 8 more send theirs a byte at a time, all at
// once, while a proxy waits for health flips; every flip arrives within
// 1s, and the bridge stays well under its memory cap.
func TestConcurrentSlowPlans(t *testing.T) {
	agent := consultest.Start(t)
	agent.RegisterTTL(t, "web", "web-1", 1001, nil, nil)
	b := startBridgeProcess(t, agent, "export_all_services = true\n", capKB)
	f := newFlipper(t, agent, b.xds)

	var wg sync.WaitGroup
	codes := make(chan int, 16)
	slow := strings.Repeat("a = <<EOT\n%{if x}\n", 480_000/18)
	for i := range 8 {
		wg.Go(func() {
			code, body := b.plan(fmt.Sprintf("slow-%d.hcl", i), fmt.Sprintf("# %d\n", i)+slow, 60*time.Second)
			// 422 for its parse time, or (the one parse admitted may end
			// within the budget on a fast or quiet machine) for what is
			// wrong with it: an if directive without its endif.
			if code == http.StatusUnprocessableEntity && !strings.Contains(body, "too long to parse") && !strings.Contains(body, "missing its corresponding endif") {
				t.Errorf("slow plan %d = 422 but neither for its parse time nor for its missing endif: %.300s", i, body)
			}
			codes <- code
		})
	}
	trickled := make(chan int, 8)
	for i := range 8 {
		wg.Go(func() { trickled <- b.trickle(fmt.Sprintf("trickle-%d.hcl", i)) })
	}
	deadline := time.Now().Add(12 * time.Second)
	for n := 0; time.Now().Before(deadline); n++ {
		f.flip(t, fmt.Sprintf("slow plans, flip %d", n))
		time.Sleep(time.Second)
	}
	wg.Wait()
	close(codes)
	close(trickled)
	seen := map[int]int{}
	for c := range codes {
		seen[c]++
	}
	for c := range trickled {
		if c != http.StatusRequestTimeout && c != 0 {
			t.Errorf("a plan sent a byte every 300ms = %d, want 408 (or the connection closed)", c)
		}
	}
	t.Logf("slow-to-parse plan answers by status: %v; peak RSS %d kB", seen, b.maxRSS.Load())
	if b.killedForRSS.Load() {
		t.Fatalf("the bridge process passed %d kB and was killed", capKB)
	}
	if seen[0] > 0 || seen[http.StatusOK] > 0 {
		t.Errorf("answers %v: want every slow plan refused (422 too slow to parse, 429 busy), none lost", seen)
	}
}

// trickle sends a plan body one byte every 300ms, as a slow client
// would, and returns the status (0 if the connection broke).
func (b *bridgeProcess) trickle(name string) int {
	pr, pw := io.Pipe()
	go func() {
		body := planJSON(name, "export_all_services = true\n")
		for i := range len(body) {
			if _, err := pw.Write([]byte{body[i]}); err != nil {
				return
			}
			time.Sleep(300 * time.Millisecond)
		}
		pw.Close()
	}()
	defer pr.Close()
	req, _ := http.NewRequest(http.MethodPost, "http://"+b.admin+"/v1/plan", pr)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

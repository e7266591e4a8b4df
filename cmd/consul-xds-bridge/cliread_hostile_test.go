package main

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/internal/procstat"
)

// The files the CLI reads that a user names (agent -config, import's
// entry files, the token and TLS files validate checks) are read with
// policy.ReadBoundedFile (docs/input-limits.md). These tests hand each
// one a FIFO, a 4 GiB sparse file and a directory, running the command
// as a child process (this test binary, re-executed into
// TestCLIReadProcess) so that a regression that waits for a FIFO's
// writer or reads the whole file costs the test a few seconds and a
// kill, not a hang or the machine's memory: the parent kills the child
// after cliReadDeadline or above cliReadRSSCapKB of VmRSS.

const (
	envCLIReadArgs  = "CLI_READ_PROCESS_ARGS"
	cliReadDeadline = 5 * time.Second
	cliReadRSSCapKB = 256 << 10 // 256 MiB: the CLI needs a few tens
	hugeFileBytes   = 4 << 30   // sparse: no disk, but os.ReadFile would read it all
)

// TestCLIReadProcess is the child: realMain with the arguments the parent
// passes (one a line), exiting with its code. It skips otherwise.
func TestCLIReadProcess(t *testing.T) {
	args := os.Getenv(envCLIReadArgs)
	if args == "" {
		t.Skip("the child process of runCLIBounded")
	}
	os.Exit(realMain(strings.Split(args, "\n"), os.Stdout, os.Stderr))
}

// cliResult is how a child CLI run ended.
type cliResult struct {
	code    int // -1 if killed
	stderr  string
	elapsed time.Duration
	hung    bool // killed after cliReadDeadline
	rssKill bool // killed above cliReadRSSCapKB
	maxRSS  int64
}

// runCLIBounded runs `consul-xds-bridge args...` as a child with a
// deadline and a memory cap.
func runCLIBounded(t *testing.T, args ...string) cliResult {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(os.Args[0], "-test.run=^TestCLIReadProcess$")
	cmd.Env = append(os.Environ(), envCLIReadArgs+"="+strings.Join(args, "\n"))
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var r cliResult
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(cliReadDeadline)
wait:
	for {
		select {
		case <-exited:
			break wait
		case <-deadline:
			r.hung = true
			_ = cmd.Process.Kill()
			<-exited
			break wait
		case <-tick.C:
			kb := childRSS(cmd.Process.Pid)
			r.maxRSS = max(r.maxRSS, kb)
			if kb > cliReadRSSCapKB {
				r.rssKill = true
				_ = cmd.Process.Kill()
				<-exited
				break wait
			}
		}
	}
	r.elapsed = time.Since(start)
	r.code = cmd.ProcessState.ExitCode()
	r.stderr = stderr.String()
	return r
}

// childRSS is a process's VmRSS in kB (0 once it is gone).
func childRSS(pid int) int64 {
	n, _ := procstat.RSS(pid)
	return n >> 10
}

// hostileFiles makes a FIFO (no writer, ever), a 4 GiB sparse file and a
// directory.
func hostileFiles(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.hcl")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.hcl")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(hugeFileBytes); err != nil {
		t.Fatal(err)
	}
	f.Close()
	sub := filepath.Join(dir, "dir.hcl")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"FIFO": fifo, "4 GiB file": huge, "directory": sub}
}

// TestCLIReadsRefuseHostileFiles: agent -config, import FILE, validate
// (its own file and a token_file it names), validate -agent, and the
// -catalog fixture of validate and test refuse a
// FIFO, a file over the limit and a directory at once, saying which path
// and why, without reading the large file. A regression to os.ReadFile or
// a blocking open fails here by the deadline or the memory cap.
func TestCLIReadsRefuseHostileFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes and a 4 GiB sparse file")
	}
	files := hostileFiles(t)
	// The reason each kind of file is refused for, after its path.
	reasons := map[string]string{
		"FIFO":      "not a regular file (a FIFO)",
		"directory": "not a regular file (a directory)",
	}
	commands := map[string]struct {
		args  func(path string) []string
		want  []string // besides the path and the reason
		limit int64    // 0: 1 MiB
	}{
		"validate -catalog": {
			args: func(p string) []string {
				return []string{"validate", "-catalog", p, "../../examples/policies/edge-gateway.hcl"}
			},
			want:  []string{"-catalog: "},
			limit: maxCatalogFile,
		},
		"test -catalog": {
			args: func(p string) []string {
				return []string{"test", "-catalog", p, "../../examples/policies/edge-gateway.test.hcl"}
			},
			want:  []string{"-catalog: "},
			limit: maxCatalogFile,
		},
		"agent -config": {
			args: func(p string) []string { return []string{"agent", "-config", p} },
			want: []string{"agent: cannot read the agent configuration: read "},
		},
		"import": {
			args: func(p string) []string { return []string{"import", p} },
			want: []string{"import: read "},
		},
		"validate token_file": {
			args: func(p string) []string {
				return []string{"validate", writeTemp(t, "config.hcl", fmt.Sprintf("consul {\n  token_file = %q\n}\nexport_all_services = true\n", p))}
			},
			want: []string{":2:3: Cannot read the Consul ACL token file", "the daemon refuses to start without it"},
		},
		"validate -agent upstream.tls.ca_file": {
			args: func(p string) []string {
				return []string{"validate", "-agent", writeTemp(t, "agent.hcl", fmt.Sprintf("allow_groups = [\"*\"]\nupstream {\n  addresses = [\"127.0.0.1:1\"]\n  tls {\n    ca_file = %q\n  }\n}\n", p))}
			},
			want: []string{":5:5: Cannot read the CA of the central bridges"},
		},
		"validate FILE": {
			args: func(p string) []string { return []string{"validate", p} },
			want: []string{"Cannot read configuration file"},
		},
	}
	for cname, c := range commands {
		for kind, path := range files {
			if cname == "validate FILE" && kind == "directory" {
				continue // validate DIR validates the *.hcl files in it
			}
			t.Run(cname+"/"+kind, func(t *testing.T) {
				r := runCLIBounded(t, c.args(path)...)
				switch {
				case r.hung:
					t.Fatalf("still running after %s (waiting for the %s?); stderr:\n%s", cliReadDeadline, kind, r.stderr)
				case r.rssKill:
					t.Fatalf("killed at %d kB of RSS after %s: it reads the %s whole; stderr:\n%s", r.maxRSS, r.elapsed.Round(time.Millisecond), kind, r.stderr)
				}
				if r.code != 1 {
					t.Errorf("exit %d, want 1; stderr:\n%s", r.code, r.stderr)
				}
				if r.elapsed > 3*time.Second {
					t.Errorf("took %s; a refusal is immediate", r.elapsed)
				}
				reason := reasons[kind]
				if kind == "4 GiB file" {
					reason = fmt.Sprintf("file too large: %d bytes, over the limit of %d", int64(hugeFileBytes), cmp.Or(c.limit, 1<<20))
				}
				for _, w := range append([]string{path + ": " + reason}, c.want...) {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
					}
				}
				t.Logf("%s, peak RSS %d kB: %s", r.elapsed.Round(time.Millisecond), r.maxRSS, strings.TrimSpace(r.stderr))
			})
		}
	}
}

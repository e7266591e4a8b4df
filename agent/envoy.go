package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// The agent runs Envoy, as Istio's pilot-agent does: it writes each
// Envoy's bootstrap (the `bootstrap` command's generator: ADS over the
// agent's own socket, admin on 127.0.0.1), starts it with Envoy's hot
// restart flags, restarts it with back-off when it exits, hot-restarts
// it (epoch N+1 beside N, which Envoy drains and shuts down) when its
// block or binary changes on SIGHUP, and drains it on stop
// (POST /drain_listeners?graceful, drain_time, POST /quitquitquit). One
// goroutine (envoyRunner.run) owns the processes; the admin API reads
// the status it publishes. The flags and admin calls follow Envoy's
// documented CLI, admin and hot restart (docs/agent-envoy.md).

// Timing of the lifecycle that is not a setting.
const (
	// envoyPoll is how often Envoy's /ready and /server_info are read.
	envoyPoll = time.Second
	// envoyStable: an Envoy that ran this long before it exited restarts
	// after the initial back-off again, not the grown one.
	envoyStable = time.Minute
	// envoyStopGrace is how long an Envoy asked to quit (quitquitquit,
	// then SIGTERM) may take before the next, harder step.
	envoyStopGrace = 5 * time.Second
)

// envoyParentGrace: a parent epoch still alive this long after its
// parent_shutdown_time, counted from its child going LIVE (the child died
// before telling it to exit), is terminated by the agent. A variable for
// tests only.
var envoyParentGrace = 10 * time.Second

// envoyProc is one running epoch.
type envoyProc struct {
	epoch   int
	cmd     *exec.Cmd
	started time.Time
	// retireBy is set once a newer epoch started beside it is LIVE:
	// Envoy's child starts the parent's shutdown clock only then (once
	// initialized: server.cc, startWorkers), so by retireBy its protocol
	// should have shut this epoch down. Counted from the child's start,
	// a child slower to initialize than parent_shutdown_time + 10 s got
	// its still-serving parent terminated undrained.
	retireBy time.Time
	termAt   time.Time // when the agent sent it SIGTERM
	err      error     // how it exited (set before exited gets it)
}

// EnvoyStatus is one Envoy on /readyz and /v1/proxies.
type EnvoyStatus struct {
	Name        string `json:"name"`
	NodeID      string `json:"node_id"`
	NodeCluster string `json:"node_cluster"`
	Epoch       int    `json:"epoch"`
	PID         int    `json:"pid,omitempty"`
	// Version is /server_info's version; State its server state
	// (PRE_INITIALIZING, INITIALIZING, LIVE, DRAINING).
	Version string `json:"version,omitempty"`
	State   string `json:"state,omitempty"`
	// Live: /ready answered LIVE; Acked: this epoch's ADS stream ACKed
	// its first config. Ready is both.
	Live  bool `json:"live"`
	Acked bool `json:"acked"`
	Ready bool `json:"ready"`
	// Reason says why it is not ready.
	Reason      string `json:"reason,omitempty"`
	Restarts    int    `json:"restarts"`
	HotRestarts int    `json:"hot_restarts"`
	LastExit    string `json:"last_exit,omitempty"`
	// Draining counts older epochs still running beside this one.
	Draining int `json:"draining_epochs,omitempty"`
}

type envoyRunner struct {
	a      *Agent
	name   string
	log    zerolog.Logger
	reload chan EnvoyConfig // the newest config wins (buffer 1)
	exited chan *envoyProc
	done   chan struct{}

	mu  sync.Mutex
	st  EnvoyStatus
	cfg EnvoyConfig // the config of the current epoch (for /metrics)
	// removed: its block is gone (its metrics go when it has stopped).
	removed bool

	// run's goroutine only.
	cur     *envoyProc
	parents []*envoyProc
	binHash string
}

func newEnvoyRunner(a *Agent, cfg EnvoyConfig) *envoyRunner {
	return &envoyRunner{
		a: a, name: cfg.Name, log: a.log.With().Str("envoy", cfg.Name).Logger(), reload: make(chan EnvoyConfig, 1),
		exited: make(chan *envoyProc, 4), done: make(chan struct{}), cfg: cfg,
		st: EnvoyStatus{Name: cfg.Name, NodeID: cfg.NodeID, NodeCluster: cfg.Cluster, Reason: "not started yet"},
	}
}

// status is the published status.
func (r *envoyRunner) status() EnvoyStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

func (r *envoyRunner) update(f func(*EnvoyStatus)) {
	r.mu.Lock()
	f(&r.st)
	r.st.Ready = r.st.Live && r.st.Acked && r.st.Reason == ""
	ready := r.st.Ready
	r.mu.Unlock()
	v := 0.0
	if ready {
		v = 1
	}
	r.a.envoys.ready.WithLabelValues(r.name).Set(v)
}

// offer hands run a config (SIGHUP): the newest replaces one not taken.
func (r *envoyRunner) offer(cfg EnvoyConfig) {
	for {
		select {
		case r.reload <- cfg:
			return
		default:
			select {
			case <-r.reload:
			default:
			}
		}
	}
}

func (r *envoyRunner) run(ctx context.Context) {
	defer close(r.done)
	cfg := r.cfg
	backoff := r.a.cfg.EnvoyBackoffInitial
	tick := time.NewTicker(envoyPoll)
	defer tick.Stop()
	var retry <-chan time.Time // set while waiting to restart
	for {
		if r.cur == nil && retry == nil {
			if err := r.start(cfg); err != nil {
				wait := backoff
				backoff = min(2*backoff, r.a.cfg.EnvoyBackoffMax)
				r.log.Error().Err(err).Stringer("retry_in", wait).Msg("cannot start Envoy")
				r.update(func(s *EnvoyStatus) {
					s.Live, s.PID, s.Reason = false, 0, fmt.Sprintf("cannot start: %v; retrying in %s", err, wait)
				})
				retry = time.After(wait)
			}
		}
		select {
		case <-ctx.Done():
			r.stop()
			return
		case <-retry:
			retry = nil
		case p := <-r.exited:
			if p != r.cur {
				r.parents = deleteProc(r.parents, p)
				r.log.Info().Int("epoch", p.epoch).Str("exit", exitText(p.err)).Msg("Envoy's old epoch exited after its drain")
				r.update(func(s *EnvoyStatus) { s.Draining = len(r.parents) })
				continue
			}
			ran := time.Since(p.started)
			if ran >= envoyStable {
				backoff = r.a.cfg.EnvoyBackoffInitial
			}
			wait := backoff
			backoff = min(2*backoff, r.a.cfg.EnvoyBackoffMax)
			why := fmt.Sprintf("epoch %d %s after %s", p.epoch, exitText(p.err), ran.Round(time.Millisecond))
			r.log.Warn().Int("epoch", p.epoch).Int("pid", p.cmd.Process.Pid).Str("exit", exitText(p.err)).Stringer("ran", ran.Round(time.Millisecond)).Stringer("restart_in", wait).
				Msg("Envoy exited; restarting it after the back-off")
			r.cur = nil
			r.a.envoys.restarts.WithLabelValues(cfg.Name).Inc()
			r.update(func(s *EnvoyStatus) {
				s.Restarts++
				s.LastExit, s.Live, s.Acked, s.PID = why, false, false, 0
				s.Reason = fmt.Sprintf("Envoy %s; restarting in %s", why, wait)
			})
			retry = time.After(wait)
		case next := <-r.reload:
			hash := fileHash(next.Binary)
			if sameEnvoy(next, cfg) && hash == r.binHash {
				r.log.Info().Msg("reload: Envoy's block and binary are unchanged")
				continue
			}
			r.log.Info().Bool("block_changed", !sameEnvoy(next, cfg)).Bool("binary_changed", hash != r.binHash).
				Msg("reload: hot-restarting Envoy with a new epoch")
			prev := cfg
			cfg = next
			if r.cur == nil {
				continue // starts with the new config (now or after the back-off)
			}
			if why := r.coldRestartNeeded(ctx, prev, next); why != "" {
				r.log.Warn().Str("reason", why).Msg("reload: Envoy cannot hot-restart; draining it and starting it afresh at epoch 0")
				r.stop()
				continue
			}
			old := r.cur
			r.parents = append(r.parents, old)
			r.cur = nil
			if err := r.start(cfg); err != nil {
				r.log.Error().Err(err).Msg("cannot start Envoy's new epoch; the old one keeps serving")
				r.cur, r.parents = old, deleteProc(r.parents, old)
				continue
			}
			r.update(func(s *EnvoyStatus) { s.HotRestarts++ })
		case <-tick.C:
			r.retireParents(r.poll(ctx))
		}
	}
}

func deleteProc(ps []*envoyProc, p *envoyProc) []*envoyProc {
	out := ps[:0]
	for _, q := range ps {
		if q != p {
			out = append(out, q)
		}
	}
	return out
}

func exitText(err error) string {
	if err == nil {
		return "exited with status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "was killed by " + ws.Signal().String()
		}
		return "exited with status " + strconv.Itoa(ee.ExitCode())
	}
	return err.Error()
}

// coldRestartNeeded says why the running Envoy (prev) cannot be
// hot-restarted into next, "" if it can: Envoy hot-restarts only within
// one base id and between binaries whose hot restart compatibility
// versions (`envoy --hot-restart-version`, GET /hot_restart_version)
// match. If either version cannot be read, a hot restart is tried.
func (r *envoyRunner) coldRestartNeeded(ctx context.Context, prev, next EnvoyConfig) string {
	if prev.BaseID != next.BaseID {
		return fmt.Sprintf("base_id changed (%d to %d): Envoy hot-restarts only within one base id", prev.BaseID, next.BaseID)
	}
	if prev.Binary == next.Binary && fileHash(next.Binary) == r.binHash {
		return ""
	}
	code, running, err := adminGet(ctx, prev, "/hot_restart_version", 4<<10)
	if err != nil || code != 200 {
		return ""
	}
	vctx, cancel := context.WithTimeout(ctx, envoyStopGrace)
	defer cancel()
	cmd := exec.CommandContext(vctx, next.Binary, "--hot-restart-version")
	cmd.Env = envoyEnv(os.Environ())
	// Envoy writes the version to stderr (options_impl.cc: std::cerr <<
	// hot_restart_version_cb(...)) and exits 0; stdout is read too, for
	// a wrapper script that moves it. Read as "" it would differ from any
	// running version and turn every upgrade into a full restart.
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &limitedWriter{w: &stdout, n: 4 << 10}, &limitedWriter{w: &stderr, n: 4 << 10}
	err = cmd.Run()
	out := lastLine(stderr.String())
	if out == "" {
		out = lastLine(stdout.String())
	}
	if err != nil || out == "" {
		r.log.Warn().Err(err).Str("binary", next.Binary).Msg("cannot read the new binary's hot restart version; trying a hot restart")
		return ""
	}
	if a, b := strings.TrimSpace(string(running)), out; a != b {
		return fmt.Sprintf("the new binary's hot restart version %q differs from the running Envoy's %q", b, a)
	}
	return ""
}

// lastLine is s's last non-empty line, trimmed.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// limitedWriter keeps the first n bytes written to it and drops the rest
// (a binary that prints without end must not grow the agent).
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if k := min(len(p), l.n); k > 0 {
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// nextEpoch is the epoch to start: one past the newest epoch still
// running (Envoy's child connects to epoch-1), 0 when none is.
func (r *envoyRunner) nextEpoch() int {
	newest := -1
	for _, p := range append([]*envoyProc{r.cur}, r.parents...) {
		if p != nil && p.epoch > newest {
			newest = p.epoch
		}
	}
	return newest + 1
}

// bootstrapFile is where cfg's bootstrap is written.
func (r *envoyRunner) bootstrapFile(cfg EnvoyConfig) string {
	return filepath.Join(r.a.cfg.DataDir, "envoy", cfg.Name+".yaml")
}

// writeBootstrap writes the bootstrap the `bootstrap` command would print
// for this Envoy against the agent's socket.
func (r *envoyRunner) writeBootstrap(cfg EnvoyConfig) (string, error) {
	bc := xds.BootstrapConfig{NodeID: cfg.NodeID, Cluster: cfg.Cluster, XDSUnix: r.a.cfg.Socket, AdminPort: cfg.AdminPort}
	if cfg.SidecarFor != "" && r.a.sidecars != nil {
		r.a.sidecars.mu.Lock()
		bc.ConsulNode = r.a.sidecars.node
		r.a.sidecars.mu.Unlock()
	}
	b, err := xds.Bootstrap(bc)
	if err != nil {
		return "", err
	}
	js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(b)
	if err != nil {
		return "", err
	}
	y, err := yaml.JSONToYAML(js)
	if err != nil {
		return "", err
	}
	file := r.bootstrapFile(cfg)
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return "", err
	}
	header := fmt.Sprintf("# Envoy bootstrap for envoy %q (node %q, node.cluster %q), written by the consul-xds-bridge agent.\n", cfg.Name, cfg.NodeID, cfg.Cluster)
	return file, writeFileAtomic(file, append([]byte(header), y...))
}

// envoyArgs are Envoy's arguments for epoch. Its hot restart socket is
// a file beside the bootstrap (data_dir/envoy, 0700), mode 600: Envoy's
// default, "@envoy_domain_socket" in the abstract namespace, has no
// permissions (envoyproxy/envoy#2908), so any local user could speak the
// hot restart RPC to it (drain it, shut it down, ask for its listen
// sockets).
func envoyArgs(cfg EnvoyConfig, file string, epoch int) []string {
	args := []string{"-c", file, "--restart-epoch", strconv.Itoa(epoch), "--base-id", strconv.Itoa(cfg.BaseID),
		"--drain-time-s", strconv.Itoa(int(cfg.DrainTime / time.Second)),
		"--parent-shutdown-time-s", strconv.Itoa(int(cfg.ParentShutdownTime / time.Second)),
		"--drain-strategy", cfg.DrainStrategy,
		"--socket-path", hotRestartSocket(file), "--socket-mode", "600"}
	if cfg.Concurrency > 0 {
		args = append(args, "--concurrency", strconv.Itoa(cfg.Concurrency))
	}
	return append(args, cfg.Args...)
}

// hotRestartSocket is the hot restart socket path Envoy is given for the
// bootstrap file: NAME.hr beside NAME.yaml. Envoy appends
// "_{parent|child}_{id}" to it.
func hotRestartSocket(bootstrap string) string {
	return strings.TrimSuffix(bootstrap, ".yaml") + ".hr"
}

// maxHotRestartSocket bounds hotRestartSocket's length: a Unix socket's
// path holds at most 107 bytes, and Envoy appends up to 18.
const maxHotRestartSocket = 88

// start writes the bootstrap and starts the next epoch as r.cur.
func (r *envoyRunner) start(cfg EnvoyConfig) error {
	file, err := r.writeBootstrap(cfg)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	epoch := r.nextEpoch()
	cmd := exec.Command(cfg.Binary, envoyArgs(cfg, file, epoch)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr // Envoy's own log goes where the agent's does (journald)
	cmd.Env = envoyEnv(os.Environ())
	// Its own process group: a signal to the agent's terminal group does
	// not reach Envoy behind the agent's drain.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r.binHash = fileHash(cfg.Binary)
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &envoyProc{epoch: epoch, cmd: cmd, started: time.Now()}
	go func() { p.err = cmd.Wait(); r.exited <- p }()
	r.cur = p
	r.mu.Lock()
	r.cfg = cfg
	r.mu.Unlock()
	r.log.Info().Int("epoch", epoch).Int("pid", cmd.Process.Pid).Str("bootstrap", file).Strs("args", cmd.Args[1:]).Msg("Envoy started")
	r.update(func(s *EnvoyStatus) {
		s.NodeID, s.NodeCluster, s.Epoch, s.PID = cfg.NodeID, cfg.Cluster, epoch, cmd.Process.Pid
		s.Live, s.Acked, s.State, s.Reason = false, false, "", "started; waiting for Envoy's /ready to say LIVE"
		s.Draining = len(r.parents)
	})
	return nil
}

// envoyEnv is Envoy's environment: the agent's without Consul's and the
// bridge's variables (CONSUL_HTTP_TOKEN, CONSUL_XDS_BRIDGE_ADMIN_TOKEN...),
// which Envoy never needs: a token must not reach a process that does
// not use it.
func envoyEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "CONSUL_") {
			out = append(out, kv)
		}
	}
	return out
}

// fileHash identifies the binary, so SIGHUP after an upgrade in place
// hot-restarts into the new one.
func fileHash(name string) string {
	f, err := os.Open(name)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// retireParents terminates old epochs past their shutdown time: their
// child died before telling them to exit. live is whether the current
// epoch is LIVE, which starts the clock of parents without one.
func (r *envoyRunner) retireParents(live bool) {
	now := time.Now()
	for _, p := range r.parents {
		if live && p.retireBy.IsZero() && r.cur != nil {
			r.mu.Lock()
			p.retireBy = now.Add(r.cfg.ParentShutdownTime + envoyParentGrace)
			r.mu.Unlock()
		}
		switch {
		case p.termAt.IsZero() && !p.retireBy.IsZero() && now.After(p.retireBy):
			r.log.Warn().Int("epoch", p.epoch).Msg("Envoy's old epoch outlived its parent_shutdown_time; terminating it")
			p.termAt = now
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		case !p.termAt.IsZero() && now.Sub(p.termAt) > envoyStopGrace:
			_ = p.cmd.Process.Kill()
		}
	}
}

// stop drains the current epoch (POST /drain_listeners?graceful, then
// drain_time or until it exits), asks it to quit (POST /quitquitquit,
// then SIGTERM, then SIGKILL, envoyStopGrace apart), and ends older
// epochs still draining.
func (r *envoyRunner) stop() {
	r.mu.Lock()
	cfg := r.cfg
	r.mu.Unlock()
	r.update(func(s *EnvoyStatus) { s.Reason = "stopping: draining" })
	alive := map[*envoyProc]bool{}
	for _, p := range append([]*envoyProc{r.cur}, r.parents...) {
		if p != nil {
			alive[p] = true
		}
	}
	waitExit := func(p *envoyProc, d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		for alive[p] {
			select {
			case q := <-r.exited:
				delete(alive, q)
			case <-t.C:
				return false
			}
		}
		return true
	}
	if p := r.cur; p != nil {
		start := time.Now()
		// Right after a hot restart the parent may still hold the admin
		// port (the new epoch takes it over first thing): a drain posted
		// then would drain the parent, and the new epoch be stopped
		// undrained.
		r.awaitAdminOf(cfg, p, envoyStopGrace, func() bool {
			select {
			case q := <-r.exited:
				delete(alive, q)
			default:
			}
			return !alive[p]
		})
		if err := r.adminPost(cfg, "/drain_listeners?graceful"); err != nil {
			r.log.Warn().Err(err).Msg("cannot ask Envoy to drain; stopping it without a drain")
		} else {
			r.log.Info().Int("epoch", p.epoch).Stringer("drain_time", cfg.DrainTime).Msg("draining Envoy before stopping it")
			waitExit(p, cfg.DrainTime)
		}
		if alive[p] {
			if err := r.adminPost(cfg, "/quitquitquit"); err != nil || !waitExit(p, envoyStopGrace) {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
				if !waitExit(p, envoyStopGrace) {
					_ = p.cmd.Process.Kill()
					waitExit(p, envoyStopGrace)
				}
			}
		}
		r.log.Info().Int("epoch", p.epoch).Stringer("took", time.Since(start).Round(time.Millisecond)).Str("exit", exitText(p.err)).Msg("Envoy stopped")
	}
	for p := range alive {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for p := range alive {
		if !waitExit(p, envoyStopGrace) {
			_ = p.cmd.Process.Kill()
			waitExit(p, envoyStopGrace)
		}
	}
	r.cur, r.parents = nil, nil
	r.update(func(s *EnvoyStatus) { s.Live, s.PID, s.Reason, s.Draining = false, 0, "stopped", 0 })
	r.a.envoys.mu.Lock()
	removed := r.removed
	r.a.envoys.mu.Unlock()
	if removed {
		r.a.envoys.ready.DeleteLabelValues(r.name)
	}
}

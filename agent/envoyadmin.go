package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Envoy's admin API, as the agent uses it: always on 127.0.0.1 (the
// bootstrap puts it there and the agent's flags forbid moving it), with
// short timeouts and bounded bodies, since whatever listens on the port
// answers. Paths: GET /ready, GET /server_info, GET /stats/prometheus,
// POST /drain_listeners?graceful, POST /quitquitquit.

const (
	envoyAdminTimeout = 2 * time.Second
	// maxServerInfo and maxEnvoyStats bound what is read from the port.
	maxServerInfo = 1 << 20
	maxEnvoyStats = 32 << 20
)

var envoyHTTP = &http.Client{Timeout: envoyAdminTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func adminURL(cfg EnvoyConfig, path string) string {
	return "http://127.0.0.1:" + strconv.Itoa(cfg.AdminPort) + path
}

func (r *envoyRunner) adminPost(cfg EnvoyConfig, path string) error {
	resp, err := envoyHTTP.Post(adminURL(cfg, path), "text/plain", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s", path, resp.Status)
	}
	return nil
}

// adminGet reads path, at most limit bytes.
func adminGet(ctx context.Context, cfg EnvoyConfig, path string, limit int64) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, envoyAdminTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, adminURL(cfg, path), nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := envoyHTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("GET %s: more than %d bytes", path, limit)
	}
	return resp.StatusCode, b, err
}

// poll reads the current epoch's /ready and /server_info and whether its
// ADS stream has ACKed, and publishes them; it reports whether the
// current epoch is LIVE.
func (r *envoyRunner) poll(ctx context.Context) bool {
	p := r.cur
	if p == nil {
		return false
	}
	r.mu.Lock()
	cfg := r.cfg
	r.mu.Unlock()
	code, body, err := adminGet(ctx, cfg, "/ready", 4<<10)
	live := err == nil && code == http.StatusOK && strings.TrimSpace(string(body)) == "LIVE"
	reason := ""
	switch {
	case err != nil:
		reason = fmt.Sprintf("Envoy's admin (127.0.0.1:%d) does not answer: %v", cfg.AdminPort, err)
	case !live:
		reason = fmt.Sprintf("Envoy's /ready says %d %q, not LIVE", code, strings.TrimSpace(string(body)))
	}
	var info struct {
		Version string `json:"version"`
		State   string `json:"state"`
	}
	if code, b, err := adminGet(ctx, cfg, "/server_info", maxServerInfo); err == nil && code == http.StatusOK {
		_ = json.Unmarshal(b, &info)
	}
	acked := r.acked(cfg.NodeID, p.started)
	if reason == "" && !acked {
		reason = "Envoy is LIVE but has not ACKed its first config from the agent"
	}
	r.update(func(s *EnvoyStatus) {
		wasReady := s.Ready
		s.Live, s.Acked, s.Reason = live, acked, reason
		if info.Version != "" {
			s.Version = info.Version
		}
		s.State = info.State
		if now := s.Live && s.Acked; now != wasReady {
			ev := r.log.Info()
			if !now {
				ev = r.log.Warn()
			}
			ev.Bool("ready", now).Int("epoch", s.Epoch).Str("reason", reason).Str("version", s.Version).Msg("Envoy readiness changed")
		}
	})
	return live
}

// acked reports whether a stream of nodeID opened since since has ACKed a
// version of every type it was sent.
func (r *envoyRunner) acked(nodeID string, since time.Time) bool {
	for _, ps := range r.a.server.Proxies() {
		if ps.NodeID != nodeID || ps.ConnectedSince.Before(since) || len(ps.Types) == 0 {
			continue
		}
		all := true
		for _, ts := range ps.Types {
			if ts.VersionAcked == "" {
				all = false
			}
		}
		if all {
			return true
		}
	}
	return false
}

// awaitAdminOf waits, at most d, until Envoy's admin port answers as p's
// epoch (/server_info's command_line_options.restart_epoch), or gone
// says p has exited.
func (r *envoyRunner) awaitAdminOf(cfg EnvoyConfig, p *envoyProc, d time.Duration, gone func() bool) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		code, b, err := adminGet(context.Background(), cfg, "/server_info", maxServerInfo)
		var info struct {
			Options struct {
				Epoch json.Number `json:"restart_epoch"`
			} `json:"command_line_options"`
		}
		if err == nil && code == http.StatusOK && json.Unmarshal(b, &info) == nil && info.Options.Epoch.String() == strconv.Itoa(p.epoch) {
			return
		}
		if gone() {
			return
		}
	}
	r.log.Warn().Int("epoch", p.epoch).Msg("Envoy's admin port does not answer as the current epoch; draining whichever does")
}

package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds/serve"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// configDumpStatus is /v1/config_dump's status for err: 404 for a node
// not connected, 503 while there is nothing to serve (before the first
// sync, or a group that never translated: REST answers it 503 too), 500
// for anything else.
func configDumpStatus(err error) int {
	switch {
	case errors.Is(err, serve.ErrUnknownNode):
		return http.StatusNotFound
	case errors.Is(err, serve.ErrNotReady), errors.Is(err, serve.ErrNoGoodState):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// serveAdmin serves the admin HTTP API.
func (d *Daemon) serveAdmin(ctx context.Context, lis net.Listener) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		reason := d.notReadyReason()
		if reason == "" {
			writeJSON(w, http.StatusOK, map[string]any{"ready": true})
			return
		}
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": reason})
	})
	mux.HandleFunc("GET /v1/proxies", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, d.xds.Proxies())
	})
	mux.HandleFunc("GET /v1/proxies/history", func(w http.ResponseWriter, r *http.Request) {
		node := r.URL.Query().Get("node")
		if node == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "give ?node=ID"})
			return
		}
		evs := d.xds.History(node)
		if evs == nil {
			evs = []serve.HistoryEvent{} // a node not connected (now)
		}
		writeJSON(w, http.StatusOK, evs)
	})
	mux.HandleFunc("GET /v1/config_dump", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("node") == "" && !q.Has("cluster") {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "give ?node=ID or ?cluster=GROUP"})
			return
		}
		key := q.Get("cluster")
		if q.Get("proxyless") == "true" {
			key = serve.ProxylessKey(key) // what gRPC clients announcing it get
		}
		dump, err := d.xds.ConfigDump(q.Get("node"), key)
		if err != nil {
			writeJSON(w, configDumpStatus(err), map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, dump)
	})
	mux.HandleFunc("GET /v1/policy", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, d.Policy())
	})
	mux.HandleFunc("GET /v1/catalog", func(w http.ResponseWriter, _ *http.Request) {
		cv := d.catalog.Load()
		if cv == nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "no catalog read from Consul yet"})
			return
		}
		var usage map[string]*ServiceUsage
		if base := d.planBase.Load(); base != nil {
			usage = serviceUsage(base.model)
		}
		writeJSON(w, http.StatusOK, struct {
			*catalogView
			AgeSeconds float64 `json:"age_seconds"`
			// UsedBy maps a Consul service to the clusters made of it
			// and the proxy groups routing to them (last good build).
			UsedBy map[string]*ServiceUsage `json:"used_by,omitempty"`
		}{cv, time.Since(cv.ReceivedAt).Seconds(), usage})
	})
	mux.HandleFunc("GET /v1/history", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, d.history.snapshot())
	})
	mux.HandleFunc("GET /v1/consul", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, d.consulStatus())
	})
	mux.HandleFunc("POST /v1/plan", d.servePlan)
	mux.HandleFunc("GET /v1/try", d.serveTry)
	mux.Handle("GET /ui/", consoleHandler())
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusFound)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{Registry: d.reg}))
	if d.cfg.Settings.Admin.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	handler := &adminGuard{next: mux, token: d.adminToken, hosts: newHostRule(lis.Addr(), d.cfg.Settings.Admin.Hosts)}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	d.log.Info().Str("addr", lis.Addr().String()).Msg("serving admin HTTP")
	select {
	case err := <-errc:
		return fmt.Errorf("admin server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("admin shutdown: %w", err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// notReadyReason says why /readyz fails, or "" when it succeeds. The
// consul_xds_bridge_ready gauge reads it too, so both always agree.
func (d *Daemon) notReadyReason() string {
	switch st := d.Policy(); {
	case !d.Ready() && st.Waiting != "":
		if failure := d.consulFailure(); failure != "" {
			return st.Waiting + "; " + failure
		}
		return st.Waiting
	case !d.Ready() && len(st.FailedGroups) > 0:
		f := st.FailedGroups[0]
		more := ""
		if n := len(st.FailedGroups) - 1; n > 0 {
			more = fmt.Sprintf(" (and %d more group(s): /v1/policy failed_groups)", n)
		}
		return fmt.Sprintf("the first build failed for proxy group %q%s, which has no last good state to serve: %s", f.Group, more, f.Error)
	case !d.Ready():
		if failure := d.consulFailure(); failure != "" {
			return "waiting for the first complete Consul sync; " + failure
		}
		return "waiting for the first complete Consul sync"
	default:
		return d.consulStale()
	}
}

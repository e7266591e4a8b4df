package main

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// buildInfo is what `version` prints: the version set at build time, the
// commit (from -ldflags, else Go's VCS stamp) and go-control-plane's
// module version.
func buildInfo() (ver, rev, gcp string) {
	ver, rev, gcp = version, commit, "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			if dep.Path == "github.com/envoyproxy/go-control-plane" {
				gcp = dep.Version
			}
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && rev == "" {
				rev = s.Value
			}
		}
	}
	if rev == "" {
		rev = "unknown"
	}
	return ver, rev, gcp
}

// registerBuildInfo adds consul_xds_bridge_build_info, the constant 1
// labelled with the build, as Prometheus' own *_build_info metrics are:
// join it on instance to see which version each replica runs.
func registerBuildInfo(reg prometheus.Registerer) {
	ver, rev, gcp := buildInfo()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "consul_xds_bridge_build_info",
		Help: "1, labelled with the version, commit, Go version and go-control-plane version of this binary.",
		ConstLabels: prometheus.Labels{"version": ver, "revision": rev, "goversion": runtime.Version(),
			"go_control_plane": gcp},
	})
	g.Set(1)
	reg.MustRegister(g)
}

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The groups phase: a fleet of sidecar-like proxy groups, each routing to
// 10 services and so getting only those 10 clusters and their endpoints
// (issue 16). Group g routes to
//
//   - service 0, which every group uses (100 % of the fleet),
//   - service 1 + g%10, which every tenth group uses (10 %),
//   - 8 services of its own (11 + 8g ... , wrapping around the catalog).
//
// A health flip then costs in proportion to the proxies whose group uses
// the service: S8 flips service 0 and service 1 and reports both.

// groupName names proxy group g.
func groupName(g int) string { return fmt.Sprintf("g%03d", g) }

// groupServices lists the services group g routes to.
func groupServices(g, services int) []int {
	out := []int{0, 1 + g%10}
	own := max(services-11, 1)
	for k := 0; k < 8; k++ {
		out = append(out, 11+(8*g+k)%own)
	}
	return out
}

// GroupsPolicy is `groups` proxy groups as above; only the services they
// route to are clusters.
func GroupsPolicy(groups, services int) string {
	var b strings.Builder
	for g := 0; g < groups; g++ {
		fmt.Fprintf(&b, "proxy %q {\n  listener \"http\" {\n    port = 8080\n    virtual_host \"all\" {\n      domains = [\"*\"]\n", groupName(g))
		for _, i := range groupServices(g, services) {
			fmt.Fprintf(&b, "      route {\n        match {\n          path_prefix = \"/%s/\"\n        }\n        service = %q\n      }\n", ServiceName(i), ServiceName(i))
		}
		b.WriteString("    }\n  }\n}\n")
	}
	return b.String()
}

// groupsPhase runs S3 (memory) and S8 (flip cost by reach) for each of
// o.GroupSizes, GroupProxies proxies per group, half SotW and half delta.
func groupsPhase(ctx context.Context, o *Options, c *Consul, emit func(Row)) error {
	for _, n := range o.GroupSizes {
		per := max(o.GroupProxies, 1)
		groups := max(n/per, 1)
		dir := filepath.Join(o.Dir, fmt.Sprintf("groups-%d", n))
		os.MkdirAll(dir, 0o755)
		t, err := StartBridge(ctx, o.BridgeBin, dir, c.HTTPAddr, GroupsPolicy(groups, o.Services), o.ServerCPUs, cpuCount(o.ServerCPUs), o.BridgeLogLevel, o.BridgeXDS...)
		if err != nil {
			return fmt.Errorf("start bridge: %w", err)
		}
		groupOf := func(k int) int { return k % groups }
		cfg := FleetConfig{
			StreamsPerConn: o.StreamsPerConn, SharedDecode: o.SharedDecode, EnvoyNode: o.EnvoyNode, H2: o.H2,
			Addr: t.XDSAddr, NodeID: t.NodeID, HoldOff: o.HoldOff,
			ClusterOf:   func(k int) string { return groupName(groupOf(k)) },
			Mode:        func(k int) Mode { return Mode(k % 2) },
			NoListeners: o.NoListeners,
		}
		r := &run{opts: o, consul: c, t: t, mode: fmt.Sprintf("groups×%d", groups), n: n, health: map[[2]int]string{}}
		o.logf("groups N=%d (%d groups of %d): connecting", n, groups, per)
		row, err := r.s3(ctx, cfg, o.ConnectParallel)
		row.Notes += fmt.Sprintf("; %d groups × 10 routed services", groups)
		emit(row)
		if err == nil {
			uses := func(svc int) func(k int) bool {
				return func(k int) bool {
					for _, i := range groupServices(groupOf(k), o.Services) {
						if i == svc {
							return true
						}
					}
					return false
				}
			}
			emit(r.s8(ctx, "S8 flip, service used by all", 0, uses(0)))
			emit(r.s8(ctx, "S8 flip, service used by 10%", 1, uses(1)))
		}
		if r.f != nil {
			if err := r.f.Errors(); err != nil {
				o.logf("groups N=%d: stream errors: %v", n, err)
			}
			r.f.Close()
		}
		resetHealth(ctx, c, r.health)
		t.Stop()
		time.Sleep(time.Second)
	}
	return nil
}

// S8: back-to-back flips of one instance of service svc, each waited for
// until every proxy whose group uses svc ACKed it; CPU per change, and
// how many proxies outside those groups saw it (want 0).
func (r *run) s8(ctx context.Context, name string, svc int, uses func(k int) bool) Row {
	flips := r.opts.S2Flips
	m := r.meter()
	r.f.ResetPushCounts()
	expected := 0
	for k := range r.f.Len() {
		if uses(k) {
			expected++
		}
	}
	var all []time.Duration
	var worst time.Duration
	var stray int64
	for k := 0; k < flips; k++ {
		st := r.toggle(svc, 0)
		addr, port := InstanceAddr(svc, 0)
		p := NewProbe(addr, port, want(st), r.f.Len()).ExpectOnly(r.f.Len(), uses)
		p.Start = time.Now()
		r.f.SetProbe(p)
		if _, _, err := r.consul.SetHealth(ctx, svc, 0, st); err != nil {
			r.f.SetProbe(nil)
			return failed(m.row(name, all, worst), err)
		}
		select {
		case <-p.Done():
		case <-time.After(r.opts.FlipTimeout):
			r.f.SetProbe(nil)
			return failed(m.row(name, all, worst), fmt.Errorf("%d of %d proxies did not ACK the flip within %v", p.Missing(), expected, r.opts.FlipTimeout))
		}
		time.Sleep(50 * time.Millisecond) // let stray deliveries show
		r.f.SetProbe(nil)
		lats := p.Latencies()
		all = append(all, lats...)
		if len(lats) > 0 {
			worst = max(worst, lats[len(lats)-1])
			for _, l := range lats {
				worst = max(worst, l)
			}
		}
		stray += p.Stray()
	}
	row := m.row(name, all, worst)
	row.CPUPerChange = row.CPU / float64(flips)
	_, total, _ := r.f.PushCounts()
	row.Notes = fmt.Sprintf("%d flips reaching %d of %d proxies: %s CPU/change (%.1f µs per reached proxy), %s/change; EDS pushes/change %.0f, CDS %.0f; proxies outside the groups that saw it: %d (want 0)",
		flips, expected, r.n, ms(time.Duration(row.CPUPerChange*float64(time.Second))),
		row.CPUPerChange*1e6/float64(max(expected, 1)), bytesStr(float64(row.Bytes)/float64(flips)),
		float64(total[EDS])/float64(flips), float64(total[CDS])/float64(flips), stray)
	if stray > 0 {
		row.Notes += " UNEXPECTED"
	}
	return row
}

// FleetPolicy is the fleet phase's policy: every catalog service a
// cluster; group "bench" (sidecar-like) routing to the first `routes`
// services and getting only those, and group "bench-edge" with the same
// routes and export_all_services = true (every cluster).
func FleetPolicy(routes int) string {
	p := Policy(true, routes)
	edge := strings.Replace(p[strings.Index(p, "proxy \"bench\""):], "proxy \"bench\" {\n", "proxy \"bench-edge\" {\n  export_all_services = true\n", 1)
	return p + "\n" + edge
}

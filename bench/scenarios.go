package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/hashicorp/consul/api"
)

// Row is one line of the results table. Durations < 0 and ConsulReqs < 0
// mean "not applicable".
type Row struct {
	Scenario   string
	Server     string
	Mode       string
	N          int
	P50, P99   time.Duration
	Max        time.Duration
	CPU        float64 // server CPU seconds during the scenario
	PeakRSS    int64   // server peak RSS during the scenario
	Bytes      int64   // xDS payload received by the fleet
	ConsulReqs float64 // Consul HTTP requests the server made
	Notes      string
	// Values for ratios.
	CPUPerChange float64
	RSSPerProxy  float64
	HeapPerProxy float64
	Failed       bool
	// perReplica says what each replica took, when there are several.
	perReplica string
	// steal is the host's steal time over the scenario (stealNote).
	steal string
}

// run is the state one fleet's scenarios share.
type run struct {
	opts   *Options
	consul *Consul
	t      *Target
	// replicas are further servers (bridge replicas) the fleet is split
	// across; rows then sum CPU, RSS and Consul requests over all of them
	// and say what each one took.
	replicas []*Target
	tier     *agentTier // the agent tier, if the run has one
	f        *Fleet
	mode     string
	n        int
	health   map[[2]int]string // current status of flipped instances
	// unconnected is the servers' memory before S3 connected the fleet,
	// the base of the per-proxy figures (zero before S3 ran).
	unconnected Memory
}

func (r *run) targets() []*Target { return append([]*Target{r.t}, r.replicas...) }

// genCPU is the load generator's CPU so far: this process and, when the
// agent tier runs apart (Options.AgentsNice), the agents' process.
func (r *run) genCPU() float64 {
	cpu := ProcCPU(os.Getpid())
	if pid := r.tier.pid(); pid != 0 {
		cpu += ProcCPU(pid)
	}
	return cpu
}

// toggle flips instance (i, j) and returns the new status.
func (r *run) toggle(i, j int) string {
	k := [2]int{i, j}
	st := api.HealthCritical
	if r.health[k] == api.HealthCritical {
		st = api.HealthPassing
	}
	r.health[k] = st
	return st
}

func want(status string) corev3.HealthStatus {
	if status == api.HealthCritical {
		return corev3.HealthStatus_UNHEALTHY
	}
	return corev3.HealthStatus_HEALTHY
}

// flipped is one flip's outcome: each proxy's latency to its ACK, the
// last of them, and when the change reached the proxies' sockets where
// the client knows it (Probe.Arrivals).
type flipped struct {
	lats     []time.Duration
	last     time.Duration
	arrivals []time.Duration
}

// flip changes one instance's check and waits until every client ACKed an
// EDS response showing it.
func (r *run) flip(ctx context.Context, i, j int, timeout time.Duration) (flipped, error) {
	st := r.toggle(i, j)
	addr, port := InstanceAddr(i, j)
	p := NewProbe(addr, port, want(st), r.f.Len())
	if r.opts.FollowOne {
		// Only the proxies that follow service i get the change.
		p.ExpectOnly(r.f.Len(), func(k int) bool { return r.followed(k) == i })
	}
	p.Start = time.Now()
	r.f.SetProbe(p)
	defer r.f.SetProbe(nil)
	if _, _, err := r.consul.SetHealth(ctx, i, j, st); err != nil {
		return flipped{}, err
	}
	select {
	case <-p.Done():
	case <-time.After(timeout):
		return flipped{lats: p.Latencies()}, fmt.Errorf("%d of %d proxies did not ACK the %s flip within %v", p.Missing(), r.f.Len(), st, timeout)
	case <-ctx.Done():
		return flipped{}, ctx.Err()
	}
	lats := p.Latencies()
	return flipped{lats: lats, last: slices.Max(lats), arrivals: p.Arrivals()}, nil
}

// slowFlips names the flips whose last proxy took over 1.5 times the
// median flip's: one slow flip in 100 proxies' worth of samples sets the
// p99, and the numbers tell a collection or a stall (every flip k apart)
// from noise. Each comes with its last socket's arrival and the server's
// fan-out where known (sockets and fans hold one per flip, -1 for none):
// a flip slow at the sockets was slow in the server or the kernel, one
// slow only after them in the load generator (or Consul beside it).
func slowFlips(lasts, sockets, fans []time.Duration) string {
	limit := percentile(lasts, 50) * 3 / 2
	var slow []string
	for k, d := range lasts {
		if d <= limit {
			continue
		}
		var parts []string
		if k < len(sockets) && sockets[k] >= 0 {
			parts = append(parts, "last socket "+ms(sockets[k]))
		}
		if k < len(fans) && fans[k] >= 0 {
			parts = append(parts, "fan-out "+ms(fans[k]))
		}
		detail := ""
		if len(parts) > 0 {
			detail = ": " + strings.Join(parts, ", ")
		}
		slow = append(slow, fmt.Sprintf("%d (%s%s)", k, ms(d), detail))
	}
	if len(slow) == 0 {
		return "; no flip over 1.5× that"
	}
	return "; over 1.5× that: flip " + strings.Join(slow, ", ")
}

func failed(row Row, err error) Row {
	row.Failed = true
	row.Notes = "FAILED: " + err.Error()
	if len(row.Notes) > 160 {
		row.Notes = row.Notes[:160] + "…"
	}
	return row
}

// S1: one instance's check flips; time from the Consul write to each
// proxy's ACK of the new endpoints, and to the last one.
func (r *run) s1(ctx context.Context) Row {
	m := r.meter()
	var all []time.Duration
	var worst time.Duration
	var lasts, arrivals []time.Duration
	// One per flip, -1 where unknown: the last socket's arrival and the
	// server's fan-out.
	var sockets, fans []time.Duration
	fan0 := r.fanout()
	for k := 0; k < r.opts.S1Flips; k++ {
		// The load generator collects its garbage before each flip (the
		// first too: connecting the fleet left the most): its collector
		// would otherwise stall every simulated proxy at once in one flip
		// of ten (a fleet of Envoys has no shared collector).
		gapStart := time.Now()
		runtime.GC()
		time.Sleep(r.opts.FlipGap - time.Since(gapStart))
		fl, err := r.flip(ctx, r.flipService(k), 0, r.opts.FlipTimeout)
		if err != nil {
			return failed(m.row("S1 health flip", all, worst), err)
		}
		all = append(all, fl.lats...)
		lasts = append(lasts, fl.last)
		worst = max(worst, fl.last)
		sockets, fans = append(sockets, -1), append(fans, -1)
		if len(fl.arrivals) == len(fl.lats) && len(fl.arrivals) > 0 {
			arrivals = append(arrivals, fl.arrivals...)
			sockets[k] = slices.Max(fl.arrivals)
		}
		// The flip's fan-out (its mean over the groups it reached): the
		// last proxy has it, so the bridge has observed it. Nothing
		// changes between flips: this reading is the next one's base.
		fan := r.fanout()
		if fan.count > fan0.count {
			fans[k] = time.Duration((fan.sum - fan0.sum) / (fan.count - fan0.count) * float64(time.Second))
		}
		fan0 = fan
	}
	row := m.row("S1 health flip", all, worst)
	row.Notes = fmt.Sprintf("%d flips; time-to-last-proxy p50 %s%s", r.opts.S1Flips, ms(percentile(lasts, 50)), slowFlips(lasts, sockets, fans))
	if lastArrivals := known(sockets); len(lastArrivals) == len(lasts) && len(lasts) > 0 {
		// What a fleet of Envoys on cores of their own would see, bar
		// their reading and applying: the latencies above also hold
		// each simulated proxy's wait for the load generator's one core.
		row.Notes += fmt.Sprintf("; at the proxies' sockets (kernel receive time) p50 %s p99 %s, last p50 %s max %s",
			ms(percentile(arrivals, 50)), ms(percentile(arrivals, 99)), ms(percentile(lastArrivals, 50)), ms(slices.Max(lastArrivals)))
	}
	if live := r.liveHeap(ctx); live > 0 && r.unconnected.Heap > 0 {
		// What the proxies hold once changes have reached them (S3 is
		// measured right after the connect, and with garbage).
		row.Notes += fmt.Sprintf("; live heap after the flips %s/proxy", bytesStr(float64(live-r.unconnected.Heap)/float64(r.n)))
	}
	if observed := known(fans); len(observed) > 0 {
		// The server's half: the proxies' half is the load generator's
		// one core reading, applying and ACKing for every proxy.
		row.Notes += fmt.Sprintf("; server fan-out per flip p50 %s max %s (push_fanout_seconds)",
			ms(percentile(observed, 50)), ms(slices.Max(observed)))
	}
	return row
}

// known is ds without its unknown (negative) values.
func known(ds []time.Duration) []time.Duration {
	return slices.DeleteFunc(slices.Clone(ds), func(d time.Duration) bool { return d < 0 })
}

// S2: server CPU per single-endpoint change, flips back to back (each
// waited for until every proxy ACKed).
func (r *run) s2(ctx context.Context) Row {
	flips := r.opts.S2Flips
	if r.mode != "mixed" && r.opts.CompareS2Flips > 0 {
		flips = r.opts.CompareS2Flips
	}
	m := r.meter()
	r.f.ResetPushCounts()
	var all []time.Duration
	var worst time.Duration
	profName := fmt.Sprintf("s2-%s-%s-%d", r.t.Name, r.mode, r.n)
	snapshotAllocs(ctx, r.t, r.opts.S2Profile, profName+"-before")
	prof := startProfile(ctx, r.t, r.opts.S2Profile, profName)
	k := 0
	for ; k < flips || profiling(prof); k++ {
		fl, err := r.flip(ctx, r.flipService(k), 0, r.opts.FlipTimeout)
		if err != nil {
			return failed(m.row("S2 CPU/change", all, worst), err)
		}
		all = append(all, fl.lats...)
		worst = max(worst, fl.last)
	}
	flips = k
	if prof != nil {
		if err := <-prof; err != nil {
			fmt.Fprintf(os.Stderr, "S2 profile: %v\n", err)
		}
	}
	snapshotAllocs(ctx, r.t, r.opts.S2Profile, profName+"-after")
	row := m.row("S2 CPU/change", all, worst)
	row.CPUPerChange = row.CPU / float64(flips)
	gen := (r.genCPU() - m.gen0) / float64(flips)
	maxPer, total, _ := r.f.PushCounts()
	row.Notes = fmt.Sprintf("%d flips: %s CPU/change (load generator %s), %s/change/proxy; pushes/proxy/change CDS %.2f EDS %.2f LDS %.2f RDS %.2f",
		flips, ms(time.Duration(row.CPUPerChange*float64(time.Second))), ms(time.Duration(gen*float64(time.Second))),
		bytesStr(float64(row.Bytes)/float64(flips)/float64(r.n)),
		per(total[CDS], flips, r.n), per(total[EDS], flips, r.n),
		per(total[LDS], flips, r.n), per(total[RDS], flips, r.n))
	_ = maxPer
	return row
}

func per(total int64, changes, n int) float64 {
	return float64(total) / float64(changes) / float64(n)
}

// S3: connect the fleet; memory per connected proxy. rss0/heap0 are the
// server's with no proxies connected.
func (r *run) s3(ctx context.Context, cfg FleetConfig, parallel int) (Row, error) {
	time.Sleep(500 * time.Millisecond)
	mem0 := r.memory()
	r.unconnected = mem0
	m := r.meter()
	var rss0 int64
	for _, s := range m.all0 {
		rss0 += s.RSS
	}
	r.f = NewFleet(cfg)
	res, err := r.f.Connect(ctx, r.n, parallel, r.opts.SyncTimeout)
	m.b0 = 0
	if err != nil {
		return failed(m.row("S3 memory", res.SyncTimes, res.AllSynced), err), err
	}
	time.Sleep(r.opts.Settle)
	runtimeGC(r.t)
	// The heap connected, before any change: S2's "-before" snapshot
	// comes after S1's flips, which leave per-stream state of their own.
	snapshotAllocs(ctx, r.t, r.opts.S2Profile, fmt.Sprintf("s3-%s-%s-%d-connected", r.t.Name, r.mode, r.n))
	var rss int64
	for _, t := range r.targets() {
		rss += SampleProc(t.PID).RSS
	}
	mem := r.memory()
	live := r.liveHeap(ctx)
	row := m.row("S3 memory", res.SyncTimes, res.AllSynced)
	row.RSSPerProxy = float64(rss-rss0) / float64(r.n)
	row.HeapPerProxy = float64(mem.Heap-mem0.Heap) / float64(r.n)
	heapNote := "heap n/a"
	if mem.Heap > 0 {
		heapNote = fmt.Sprintf("heap %s (%s/proxy)", bytesStr(float64(mem.Heap)), bytesStr(row.HeapPerProxy))
	}
	if mem.HeapIdle > 0 {
		// Free spans the RSS still holds: what a fleet's connect left
		// behind that the runtime has not returned yet.
		heapNote += fmt.Sprintf(", free spans held %s (idle releases %d)", bytesStr(float64(mem.HeapIdle-mem.HeapReleased)), mem.IdleReleases)
	}
	if live > 0 {
		heapNote += fmt.Sprintf(", live %s/proxy after two collections", bytesStr(float64(live-mem0.Heap)/float64(r.n)))
	}
	if mem.Stacks > 0 {
		heapNote += fmt.Sprintf(", stacks %s/proxy (%.1f goroutines/proxy)",
			bytesStr(float64(mem.Stacks-mem0.Stacks)/float64(r.n)), float64(mem.Goroutines-mem0.Goroutines)/float64(r.n))
	}
	// max is the last proxy's full state from the first dial, which
	// includes the load generator's dialling; the slowest proxy from its
	// own dial is the other reading of "all in full state after connecting".
	row.Notes = fmt.Sprintf("latency = connect to full state (max: from the first dial; dialling took %s; slowest from its own dial %s); RSS %s→%s (%s/proxy), %s",
		ms(res.Dialled), ms(slowest(res.SyncTimes)), bytesStr(float64(rss0)), bytesStr(float64(rss)), bytesStr(row.RSSPerProxy), heapNote)
	return row, nil
}

// slowest is the longest of ds, -1 (n/a) for none.
func slowest(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	return slices.Max(ds)
}

// runtimeGC lets the server's heap settle before a reading; we cannot
// force a GC in another process, so we just wait a GC cycle's worth.
func runtimeGC(*Target) { time.Sleep(200 * time.Millisecond) }

// liveHeap is the Go heap of every server of the run that serves
// net/http/pprof after two collections it is made to run (its heap
// profile with gc=1): what is live, without the garbage a reading may
// catch nor what sync.Pools hold (the first collection only moves it to
// their victim caches). 0 if a server cannot be made to collect, and
// unless the run profiles (-s2-profile): a collection made between
// scenarios would start the next one from a heap no fleet's server has
// (S1's first flip after the connect, S2's CPU per change).
func (r *run) liveHeap(ctx context.Context) int64 {
	if r.opts.S2Profile == "" {
		return 0
	}
	for _, t := range r.targets() {
		if t.ProfileURL == "" {
			return 0
		}
		url := strings.TrimSuffix(t.ProfileURL, "/profile") + "/heap?gc=1"
		for range 2 {
			if err := fetch(ctx, url, t.AdminToken, os.DevNull); err != nil {
				return 0
			}
		}
	}
	return r.memory().Heap
}

// S4 idle: Consul requests per second the server makes with nothing
// changing.
func (r *run) s4idle(ctx context.Context) Row {
	m := r.meter()
	// A profile of the idle server says what its idle CPU is spent on. It
	// samples the spell's last profileSeconds, the steadiest part (the
	// first seconds after a connect may still hold its leftovers), so only
	// a spell that long has one.
	var (
		prof  <-chan error
		tail0 float64 // the servers' CPU where the profile starts
	)
	lead := r.opts.IdleTime - profileSeconds*time.Second
	if lead >= 0 && r.opts.S2Profile != "" {
		select {
		case <-time.After(lead):
		case <-ctx.Done():
		}
		tail0 = r.serverCPU()
		prof = startProfile(ctx, r.t, r.opts.S2Profile, fmt.Sprintf("s4-%s-%s-%d", r.t.Name, r.mode, r.n))
		lead = profileSeconds * time.Second
	} else {
		lead = r.opts.IdleTime
	}
	select {
	case <-time.After(lead):
	case <-ctx.Done():
	}
	if prof != nil {
		if err := <-prof; err != nil {
			fmt.Fprintf(os.Stderr, "S4 profile: %v\n", err)
		}
	}
	row := m.row("S4 Consul load idle", nil, -1)
	// The server's CPU with nothing changing: what a scenario's CPU per
	// change includes for each second it lasts.
	row.Notes = fmt.Sprintf("%.2f req/s over %s; server CPU %.1f ms/s", row.ConsulReqs/r.opts.IdleTime.Seconds(), r.opts.IdleTime, row.CPU*1000/r.opts.IdleTime.Seconds())
	if prof != nil {
		row.Notes += fmt.Sprintf(" (its last %ds, profiled: %.1f ms/s)", profileSeconds, (r.serverCPU()-tail0)*1000/profileSeconds)
	}
	if row.ConsulReqs < 0 {
		row.Notes = "n/a"
	}
	return row
}

// serverCPU is the CPU seconds the servers under test have used.
func (r *run) serverCPU() float64 {
	var cpu float64
	for _, t := range r.targets() {
		cpu += SampleProc(t.PID).CPU
	}
	return cpu
}

// S5 churn storm: StormRate flips/s spread over services for StormTime;
// a probe instance flips once a second to measure latency under churn.
// Returns the S5 row and the S4-under-churn row.
func (r *run) s5(ctx context.Context) (Row, Row) {
	m := r.meter()
	r.f.ResetPushCounts()
	heap0 := r.t.Memory(r.consul).Heap
	rss0 := m.s0.RSS
	interval := time.Second / time.Duration(max(1, r.opts.StormRate))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	end := time.Now().Add(r.opts.StormTime)
	var (
		lats     []time.Duration
		lasts    []time.Duration
		probe    *Probe
		flips    int
		errs     int
		skipped  int
		werrs    atomic.Int64
		inflight = make(chan struct{}, 8)
		nextPr   = time.Now()
	)
	collect := func(wait time.Duration) {
		if probe == nil {
			return
		}
		select {
		case <-probe.Done():
		case <-time.After(wait):
		}
		l := probe.Latencies()
		lats = append(lats, l...)
		if probe.Missing() == 0 {
			lasts = append(lasts, slices.Max(l))
		} else {
			lasts = append(lasts, r.opts.FlipTimeout) // counts as a timeout
		}
		probe = nil
		r.f.SetProbe(nil)
	}
	svc := 1
	for time.Now().Before(end) && ctx.Err() == nil {
		<-tick.C
		i := 1 + svc%max(1, r.opts.Services-1)
		svc++
		st := r.toggle(i, 1)
		// Writes go out asynchronously (at most 8 in flight) so a slow
		// Consul answer does not lower the rate; the achieved rate is
		// reported.
		select {
		case inflight <- struct{}{}:
			go func() {
				defer func() { <-inflight }()
				if err := r.consul.SetHealthMany(ctx, [][2]int{{i, 1}}, []string{st}); err != nil {
					werrs.Add(1)
				}
			}()
			flips++
		default:
			skipped++
		}
		if probe != nil {
			select {
			case <-probe.Done():
				collect(0)
			default:
			}
		}
		if probe == nil && time.Now().After(nextPr) {
			st := r.toggle(0, 2)
			addr, port := InstanceAddr(0, 2)
			probe = NewProbe(addr, port, want(st), r.f.Len())
			probe.Start = time.Now()
			r.f.SetProbe(probe)
			if err := r.consul.SetHealthMany(ctx, [][2]int{{0, 2}}, []string{st}); err != nil {
				errs++
			}
			nextPr = time.Now().Add(time.Second)
		}
	}
	storm := time.Since(end.Add(-r.opts.StormTime))
	for range cap(inflight) {
		inflight <- struct{}{}
	}
	errs += int(werrs.Load())
	collect(r.opts.FlipTimeout)
	s := SampleProc(r.t.PID)
	heap1 := r.t.Memory(r.consul).Heap
	row := m.row("S5 churn storm", lats, -1)
	if len(lasts) > 0 {
		row.Max = slices.Max(lasts)
	}
	maxPer, total, fast := r.f.PushCounts()
	windows := storm.Seconds() / r.opts.HoldOff.Seconds()
	row.Notes = fmt.Sprintf("%d flips in %s (%d/s); EDS pushes/proxy max %d avg %.1f (%.2f/s; ≤1 per %s window: %d of %d pushes closer than %s); RSS %s→%s heap %s→%s; write errors %d, skipped (8 writes in flight) %d",
		flips, storm.Round(time.Millisecond), int(float64(flips)/storm.Seconds()+0.5), maxPer[EDS], float64(total[EDS])/float64(r.n),
		float64(total[EDS])/float64(r.n)/storm.Seconds(), r.opts.HoldOff, fast, total[EDS]+total[CDS]+total[LDS]+total[RDS], r.opts.HoldOff,
		bytesStr(float64(rss0)), bytesStr(float64(s.RSS)), bytesStr(float64(heap0)), bytesStr(float64(heap1)), errs, skipped)
	_ = windows
	churn := Row{Scenario: "S4 Consul load churn", Server: r.t.Name, Mode: r.mode, N: r.n, P50: -1, P99: -1, Max: -1,
		CPU: row.CPU, PeakRSS: row.PeakRSS, ConsulReqs: row.ConsulReqs, Notes: "n/a"}
	if row.ConsulReqs >= 0 {
		churn.Notes = fmt.Sprintf("%.2f req/s during %d flips/s", row.ConsulReqs/storm.Seconds(), r.opts.StormRate)
	}
	// Let the last builds settle before the next scenario.
	time.Sleep(r.opts.MaxDelay + 200*time.Millisecond)
	return row, churn
}

// S6 reconnect storm: every proxy drops and reconnects at once.
func (r *run) s6(ctx context.Context, cfg FleetConfig) Row {
	r.f.Close()
	time.Sleep(500 * time.Millisecond)
	m := r.meter()
	prof := startProfile(ctx, r.t, r.opts.S2Profile, fmt.Sprintf("s6-%s-%s-%d", r.t.Name, r.mode, r.n))
	r.f = NewFleet(cfg)
	res, err := r.f.Connect(ctx, r.n, 0, r.opts.SyncTimeout)
	m.b0 = 0
	row := m.row("S6 reconnect storm", res.SyncTimes, res.AllSynced)
	if prof != nil {
		// The profile samples a fixed time; what follows the storm is idle.
		if err := <-prof; err != nil {
			fmt.Fprintf(os.Stderr, "S6 profile: %v\n", err)
		}
	}
	if err != nil {
		return failed(row, err)
	}
	row.Notes = fmt.Sprintf("latency = reconnect to full state; slowest first response %s, p99 first response %s; load generator %.2f CPU-s",
		ms(slices.Max(res.FirstResponse)), ms(percentile(res.FirstResponse, 99)), r.genCPU()-m.gen0)
	return row
}

// S7: a service is added, then removed. CDS push cost, and the new
// cluster (and so its EDS) only to the edge group's proxies: the sidecar
// group does not route to it, so it never gets it.
func (r *run) s7(ctx context.Context, newSvc int) Row {
	m := r.meter()
	name := ServiceName(newSvc)
	wide := 0
	for _, c := range r.f.Clients() {
		if !c.narrow {
			wide++
		}
	}
	r.f.WatchEDS(name)
	defer r.f.WatchEDS("")
	cdsBytes0 := r.f.Bytes[CDS].Load()
	edge := func(k int) bool { return !r.f.Clients()[k].narrow }
	p := NewClusterProbe(name, false, r.f.Len()).ExpectOnly(r.f.Len(), edge)
	p.Start = time.Now()
	r.f.SetProbe(p)
	if err := r.consul.RegisterServices(ctx, newSvc, newSvc+1, r.opts.Instances); err != nil {
		return failed(m.row("S7 service add/remove", nil, -1), err)
	}
	select {
	case <-p.Done():
	case <-time.After(r.opts.FlipTimeout):
		return failed(m.row("S7 service add/remove", p.Latencies(), -1), fmt.Errorf("%d proxies never got cluster %s", p.Missing(), name))
	}
	addLats := p.Latencies()
	// EDS for the new cluster follows the CDS ACK.
	deadline := time.Now().Add(r.opts.FlipTimeout)
	for r.f.WatchHitsWide.Load() < int64(wide) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // give stray narrow deliveries a chance to show
	cdsAdd := r.f.Bytes[CDS].Load() - cdsBytes0
	cpuAdd := ProcCPU(r.t.PID) - m.s0.CPU
	hitsWide, hitsNarrow := r.f.WatchHitsWide.Load(), r.f.WatchHitsNarrow.Load()

	rp := NewClusterProbe(name, true, r.f.Len()).ExpectOnly(r.f.Len(), edge)
	rp.Start = time.Now()
	r.f.SetProbe(rp)
	if err := r.consul.DeregisterService(ctx, newSvc, r.opts.Instances); err != nil {
		return failed(m.row("S7 service add/remove", addLats, -1), err)
	}
	var rmMax time.Duration = -1
	select {
	case <-rp.Done():
		rmMax = slices.Max(rp.Latencies())
	case <-time.After(r.opts.FlipTimeout):
	}
	r.f.SetProbe(nil)
	row := m.row("S7 service add/remove", addLats, -1)
	row.Notes = fmt.Sprintf("latency = add to CDS ACK (edge group); add cost %s CPU, CDS %s/proxy; new cluster in CDS of %d sidecar proxies (want 0); its EDS to %d of %d edge proxies, %d sidecar proxies (want 0); removal seen by all edge proxies in %s",
		ms(time.Duration(cpuAdd*float64(time.Second))), bytesStr(float64(cdsAdd)/float64(r.n)), p.Stray(), hitsWide, wide, hitsNarrow, ms(rmMax))
	if hitsNarrow > 0 || p.Stray() > 0 {
		row.Notes += " UNEXPECTED"
	}
	return row
}

func ms(d time.Duration) string {
	if d < 0 {
		return "n/a"
	}
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	default:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
}

func bytesStr(b float64) string {
	switch {
	case b < 0:
		return "-" + bytesStr(-b)
	case b >= 1<<30:
		return fmt.Sprintf("%.2fGiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1fMiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1fKiB", b/(1<<10))
	default:
		return fmt.Sprintf("%.0fB", b)
	}
}

package bench

import (
	"context"
	"fmt"
	"os"
	"time"
)

// S9: back-to-back flips (issue 40): each flip is written as soon as the
// whole fleet holds the previous one, with no pause and no collection of
// the load generator between them — the pattern of a rolling deploy or a
// flapping check, and the one an over-waiting debounce or a floor between
// Consul queries shows in every flip. Latency per proxy as S1; CPU per
// change as S2; the flips a second it sustained.
func (r *run) s9(ctx context.Context) Row {
	flips := r.opts.S2Flips
	if r.opts.CompareS2Flips > 0 {
		flips = r.opts.CompareS2Flips
	}
	m := r.meter()
	consul0 := ProcCPU(r.consul.PID())
	var all, lasts []time.Duration
	var worst time.Duration
	start := time.Now()
	// With -s2-profile, S9 flips on until its CPU profile is written, as
	// S2 does, so the profile holds flips and not the quiet after them.
	prof := startProfile(ctx, r.t, r.opts.S2Profile, fmt.Sprintf("s9-%s-%s-%d", r.t.Name, r.mode, r.n))
	f := 0
	for ; f < flips || profiling(prof); f++ {
		fl, err := r.flip(ctx, r.flipService(f), 0, r.opts.FlipTimeout)
		if err != nil {
			return failed(m.row("S9 back-to-back flips", all, worst), err)
		}
		all = append(all, fl.lats...)
		lasts = append(lasts, fl.last)
		worst = max(worst, fl.last)
	}
	flips = f
	if prof != nil {
		if err := <-prof; err != nil {
			fmt.Fprintf(os.Stderr, "S9 profile: %v\n", err)
		}
	}
	took := time.Since(start)
	row := m.row("S9 back-to-back flips", all, worst)
	row.CPUPerChange = row.CPU / float64(flips)
	gen := (r.genCPU() - m.gen0) / float64(flips)
	// The backing Consul's CPU too: what the server's queries cost it
	// (for the peer it is the server itself).
	consul := (ProcCPU(r.consul.PID()) - consul0) / float64(flips)
	row.Notes = fmt.Sprintf("%d flips back to back in %s (%.1f/s): %s CPU/change (load generator %s, Consul %s); time-to-last-proxy p50 %s",
		flips, took.Round(time.Millisecond), float64(flips)/took.Seconds(),
		ms(time.Duration(row.CPUPerChange*float64(time.Second))), ms(time.Duration(gen*float64(time.Second))),
		ms(time.Duration(consul*float64(time.Second))), ms(percentile(lasts, 50)))
	// Read after the CPU figures: a 20,000-stream status is work too.
	if note := r.ackNote(ctx); note != "" {
		row.Notes += "; " + note
	}
	return row
}

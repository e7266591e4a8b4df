package bench

import (
	"testing"
	"time"
)

// TestSlowFlipsSayWhereTheTimeWent: a flip over 1.5× the median is named
// with its last socket's arrival and the server's fan-out, where known,
// so a reader can tell a slow server from a slow load generator.
func TestSlowFlipsSayWhereTheTimeWent(t *testing.T) {
	msd := func(v ...float64) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x * float64(time.Millisecond))
		}
		return out
	}
	lasts := msd(40, 41, 90, 39, 80, 42)
	sockets := msd(30, 31, 33, 30, 75, 31)
	fans := msd(20, 21, 22, 20, 0, 21)
	fans[4] = -1 // the server's metric did not move in that flip
	got := slowFlips(lasts, sockets, fans)
	want := "; over 1.5× that: flip 2 (90.0ms: last socket 33.0ms, fan-out 22.0ms), 4 (80.0ms: last socket 75.0ms)"
	if got != want {
		t.Fatalf("slowFlips = %q\nwant %q", got, want)
	}
	if got := slowFlips(msd(40, 41, 42), nil, nil); got != "; no flip over 1.5× that" {
		t.Fatalf("no slow flip: %q", got)
	}
	if got := slowFlips(msd(40, 90, 41), nil, nil); got != "; over 1.5× that: flip 1 (90.0ms)" {
		t.Fatalf("without sockets or fan-outs: %q", got)
	}
}

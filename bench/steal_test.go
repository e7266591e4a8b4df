package bench

import (
	"runtime"
	"testing"
	"time"
)

// TestStealNote: a span in which a CPU lost 10 ms or more to other guests
// is named with every CPU's loss; a quieter one says nothing.
func TestStealNote(t *testing.T) {
	ms := time.Millisecond
	if got := stealNote([]time.Duration{100 * ms, 200 * ms}, []time.Duration{109 * ms, 205 * ms}); got != "" {
		t.Errorf("9 and 5 ms lost: %q, want nothing", got)
	}
	if got, want := stealNote([]time.Duration{100 * ms, 200 * ms}, []time.Duration{110 * ms, 230 * ms}), "host steal cpu0 10ms, cpu1 30ms"; got != want {
		t.Errorf("10 and 30 ms lost: %q, want %q", got, want)
	}
	if got := stealNote(nil, []time.Duration{time.Second}); got != "" {
		t.Errorf("no first reading: %q, want nothing", got)
	}
}

// TestCPUSteal reads a value per online CPU from this machine's /proc/stat, and
// none goes back.
func TestCPUSteal(t *testing.T) {
	a := CPUSteal()
	// /proc/stat lists every online CPU; this process may run on fewer.
	if len(a) < runtime.NumCPU() {
		t.Fatalf("%d CPUs' steal, want one for each of the %d this process may use at least", len(a), runtime.NumCPU())
	}
	b := CPUSteal()
	for i := range a {
		if b[i] < a[i] {
			t.Errorf("cpu%d's steal went back: %v then %v", i, a[i], b[i])
		}
	}
}

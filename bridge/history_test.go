package bridge

import (
	"testing"
	"time"
)

// The history keeps the last historySize samples, oldest first, and turns
// the xDS counters into per-interval counts.
func TestHistoryRingIsBounded(t *testing.T) {
	var h history
	t0 := time.Unix(0, 0)
	for i := range historySize + 25 {
		h.addBuild(BuildSample{At: t0.Add(time.Duration(i) * time.Second)})
	}
	got := h.snapshot().Builds
	if len(got) != historySize {
		t.Fatalf("%d builds kept, want %d", len(got), historySize)
	}
	if !got[0].At.Equal(t0.Add(25*time.Second)) || !got[historySize-1].At.Equal(t0.Add(time.Duration(historySize+24)*time.Second)) {
		t.Errorf("kept %v .. %v, want the newest %d oldest first", got[0].At, got[historySize-1].At, historySize)
	}
}

func TestHistoryTickCountsPerInterval(t *testing.T) {
	var h history
	t0 := time.Unix(0, 0)
	h.tick(t0, 1, counters{nacks: 2, pushes: 10, fanouts: 3, fanoutSum: 0.3})
	h.tick(t0.Add(2*time.Second), 3, counters{nacks: 5, pushes: 14, fanouts: 5, fanoutSum: 0.32})
	h.tick(t0.Add(4*time.Second), 3, counters{nacks: 5, pushes: 14, fanouts: 5, fanoutSum: 0.32})
	s := h.snapshot().Samples
	if len(s) != 3 {
		t.Fatalf("%d samples", len(s))
	}
	if s[0].NACKs != 0 || s[0].FanoutMs != nil {
		t.Errorf("first sample %+v: no interval yet", s[0])
	}
	if s[1].Proxies != 3 || s[1].NACKs != 3 || s[1].NACKsTotal != 5 || s[1].Pushes != 4 || s[1].Fanouts != 2 || s[1].FanoutMs == nil || *s[1].FanoutMs < 9.99 || *s[1].FanoutMs > 10.01 {
		t.Errorf("second sample %+v, want 3 NACKs, 4 pushes, 2 fan-outs of 10ms mean", s[1])
	}
	if s[2].NACKs != 0 || s[2].FanoutMs != nil {
		t.Errorf("quiet sample %+v", s[2])
	}
}

package consul

import (
	"testing"
	"time"
)

// TestPublishLatestKeepsTheFirstChange: an update nobody took is replaced
// by the newer one, which keeps the earlier change time; a taken one is
// not touched.
func TestPublishLatestKeepsTheFirstChange(t *testing.T) {
	type upd struct {
		n  int
		at time.Time
	}
	at := func(u *upd) *time.Time { return &u.at }
	ch := make(chan upd, 1)
	t0 := time.Unix(100, 0)
	publishLatest(ch, upd{1, t0}, at)
	publishLatest(ch, upd{2, t0.Add(time.Second)}, at)
	if got := <-ch; got.n != 2 || !got.at.Equal(t0) {
		t.Fatalf("got %+v, want update 2 with the first change's time", got)
	}
	publishLatest(ch, upd{3, t0.Add(2 * time.Second)}, at)
	if got := <-ch; got.n != 3 || !got.at.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("got %+v, want update 3 at its own time", got)
	}
}

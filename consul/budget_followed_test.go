package consul

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestBudgetFollowedViewsKeepTheirSlots: while views take turns, the
// views of services a connected proxy follows each keep a slot of their
// own, never shortened, ahead of the views taking turns; the others share
// what is left. With more followed views than fit beside two slots for
// the others, everybody takes turns again.
func TestBudgetFollowedViewsKeepTheirSlots(t *testing.T) {
	ctx := t.Context()
	b := newBudget(6, time.Minute, zerolog.Nop()) // the hint view's slot and 5
	b.join("health_state", true)
	var views []*member
	for i := range 10 {
		views = append(views, b.join(fmt.Sprint("v", i), false))
	}
	f1, f2 := b.join("f1", false), b.join("f2", false)
	f1.setFollowed(true)
	f2.setFollowed(true)

	// 12 views on 5 slots: f1 and f2 keep one each; the other 10 take
	// turns on 2 (and the express slot), each turn 60 s × 2 / 10.
	if got := f1.wait(time.Minute); got != time.Minute {
		t.Fatalf("a followed view's wait = %v, want the whole minute", got)
	}
	if got, want := views[0].wait(time.Minute), 12*time.Second; got != want {
		t.Fatalf("a view taking turns waits %v, want %v", got, want)
	}

	// The views taking turns hold what they may, and more wait.
	var rels []func()
	for _, v := range views[:2] {
		rels = append(rels, acquireAsync(t, ctx, v, false).take(t))
	}
	waiting := acquireAsync(t, ctx, views[2], false)
	if waiting.granted() {
		t.Fatal("a third view taking turns got a slot kept for the followed views")
	}
	// A followed view that asks is served at once, ahead of them.
	relF1 := acquireAsync(t, ctx, f1, false).take(t)
	relF2 := acquireAsync(t, ctx, f2, false).take(t)
	if waiting.granted() {
		t.Fatal("the waiting view got a slot")
	}
	if _, inUse, _ := b.stats(); inUse != 4 {
		t.Fatalf("in use %d, want 4 (2 in turns, 2 followed)", inUse)
	}
	// A followed view's slot, given back, is not the others'.
	relF1()
	time.Sleep(20 * time.Millisecond)
	if waiting.granted() {
		t.Fatal("a view taking turns took a followed view's slot")
	}
	relF1 = acquireAsync(t, ctx, f1, false).take(t)

	// No longer followed: f2 takes turns like the others once it gives
	// its slot back, and the waiting view gets a turn.
	f2.setFollowed(false)
	relF2()
	rels = append(rels, waiting.take(t))
	if got := f2.wait(time.Minute); got == time.Minute {
		t.Fatal("a view no longer followed still waits the whole minute")
	}

	// Four followed views do not fit beside two slots for the others
	// (5 - 2 = 3): nobody is kept a slot, and the followed views wait.
	for _, v := range views[3:6] {
		v.setFollowed(true)
	}
	if got := f1.wait(time.Minute); got == time.Minute {
		t.Fatal("followed views kept their own slots with more of them than fit")
	}
	hv := acquireAsync(t, ctx, views[3], false)
	time.Sleep(20 * time.Millisecond)
	if hv.granted() {
		t.Fatal("a followed view got a slot beyond the turns while not prioritised")
	}
	for _, rel := range rels {
		rel()
	}
	relF1()
	hv.take(t)
}

// TestBudgetFollowedNeverExceedsItsSlots: views becoming followed and no
// longer followed at random, in and out of priority, while all of them
// take slots: never more than the budget, the hint views' slots never
// taken by another, and nothing held or waiting once they stop.
func TestBudgetFollowedNeverExceedsItsSlots(t *testing.T) {
	const slots = 8
	b := newBudget(slots, time.Minute, zerolog.Nop())
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	members := make([]*member, 40)
	for i := range members {
		members[i] = b.join(fmt.Sprint(i), i < 2) // the two status hint views
	}
	for _, m := range members {
		wg.Go(func() {
			for ctx.Err() == nil {
				rel, ok := m.acquire(ctx, rand.N(4) == 0)
				if !ok {
					return
				}
				time.Sleep(time.Duration(rand.N(200)) * time.Microsecond)
				rel()
			}
		})
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			// Up to 12 followed at once: in priority (≤ 5) and out of it.
			members[2+rand.N(12)].setFollowed(rand.N(2) == 0)
			time.Sleep(time.Duration(rand.N(300)) * time.Microsecond)
		}
	})
	deadline := time.Now().Add(400 * time.Millisecond)
	for time.Now().Before(deadline) {
		b.mu.Lock()
		inUse, shared := b.inUse, b.shared
		b.mu.Unlock()
		if inUse > slots || shared > slots-2 {
			t.Fatalf("%d slots in use (%d by views other than the two hint views), budget %d", inUse, shared, slots)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inUse != 0 || b.shared != 0 || b.followedHeld != 0 || b.followedQ.Len()+b.hurried.Len()+b.normal.Len()+len(b.hintWaiters) != 0 {
		t.Fatalf("after stopping: in use %d, shared %d, followed held %d, waiting %d", b.inUse, b.shared, b.followedHeld, b.followedQ.Len()+b.hurried.Len()+b.normal.Len())
	}
}

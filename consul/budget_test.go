package consul

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// holder acquires a slot for m in the background; release gets the release
// func once the slot is granted.
type holder struct {
	id      string
	release chan func()
}

func acquireAsync(t *testing.T, ctx context.Context, m *member, urgent bool) holder {
	t.Helper()
	h := holder{id: m.id, release: make(chan func(), 1)}
	before := len(m.b.queued())
	go func() {
		if rel, ok := m.acquire(ctx, urgent); ok {
			h.release <- rel
		}
	}()
	// Wait until it is either granted or queued, so arrival order is known.
	deadline := time.Now().Add(5 * time.Second)
	for len(h.release) == 0 && len(m.b.queued()) == before {
		if time.Now().After(deadline) {
			t.Fatalf("%s neither granted nor queued", m.id)
		}
		time.Sleep(time.Millisecond)
	}
	return h
}

func (h holder) granted() bool { return len(h.release) > 0 }

// take waits for the slot and returns its release func.
func (h holder) take(t *testing.T) func() {
	t.Helper()
	select {
	case rel := <-h.release:
		return rel
	case <-time.After(5 * time.Second):
		t.Fatalf("%s never got a slot", h.id)
		return nil
	}
}

// pass releases rel and checks that exactly next, of waiting, gets the
// freed slot (or nobody, if next is nil); it returns next's release func.
func pass(t *testing.T, rel func(), next *holder, waiting ...*holder) func() {
	t.Helper()
	rel()
	if next == nil {
		time.Sleep(30 * time.Millisecond)
	}
	var got func()
	if next != nil {
		got = next.take(t)
	}
	for _, h := range waiting {
		if h != next && h.granted() {
			t.Fatalf("%s got the slot meant for %v", h.id, next)
		}
	}
	return got
}

func TestBudgetServesInArrivalOrderHurriedFirst(t *testing.T) {
	b := newBudget(3, time.Minute, zerolog.Nop())
	ctx := t.Context()
	m := map[string]*member{}
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		m[id] = b.join(id, false)
	}
	// Seven views for three slots: two for turns, one kept for hurried views.
	relA := acquireAsync(t, ctx, m["a"], false).take(t)
	relB := acquireAsync(t, ctx, m["b"], false).take(t)
	c := acquireAsync(t, ctx, m["c"], false)
	d := acquireAsync(t, ctx, m["d"], false)
	e := acquireAsync(t, ctx, m["e"], false)
	if _, inUse, _ := b.stats(); inUse != 2 {
		t.Fatalf("views waiting their turn took the slot kept for hurried ones: %d in use", inUse)
	}
	relF := acquireAsync(t, ctx, m["f"], true).take(t) // a read that does not block
	g := acquireAsync(t, ctx, m["g"], true)
	m["e"].poke(42) // a health hint for e, which waits
	if got, want := b.queued(), []string{"g", "e", "c", "d"}; !slices.Equal(got, want) {
		t.Fatalf("queue = %v, want %v", got, want)
	}
	if s, inUse, w := b.stats(); s != 3 || inUse != 3 || w != 4 {
		t.Fatalf("stats = %d, %d, %d; want 3, 3, 4", s, inUse, w)
	}

	all := []*holder{&c, &d, &e, &g}
	relG := pass(t, relF, &g, all...) // the kept slot, to a hurried view
	relE := pass(t, relA, &e, all...) // hurried views first
	pass(t, relB, nil, all...)        // the last free slot is kept for hurried views
	relC := pass(t, relG, &c, all...) // then arrival order
	relD := pass(t, relE, &d, all...)
	relC()
	relD()
	if _, inUse, w := b.stats(); inUse != 0 || w != 0 {
		t.Fatalf("after releasing everything: %d in use, %d waiting", inUse, w)
	}
}

func TestBudgetKeepsASlotForTheHintView(t *testing.T) {
	b := newBudget(2, time.Minute, zerolog.Nop())
	ctx := t.Context()
	a, c := b.join("a", false), b.join("c", false)
	relA := acquireAsync(t, ctx, a, false).take(t)
	relC := acquireAsync(t, ctx, c, false).take(t)

	// The hint view starts while the others hold every slot: it must wait
	// rather than exceed the budget, and then go first.
	hint := b.join("health_state", true)
	d := b.join("d", false)
	hd := acquireAsync(t, ctx, d, true)
	hh := acquireAsync(t, ctx, hint, false)
	if _, inUse, _ := b.stats(); inUse != 2 || hh.granted() {
		t.Fatalf("hint view granted a third slot of 2 (in use %d)", inUse)
	}
	relA()
	relH := hh.take(t)
	if hd.granted() {
		t.Fatal("d took the slot that was freed for the waiting hint view")
	}
	// From now on the hint view's slot is kept for it.
	relH()
	time.Sleep(20 * time.Millisecond)
	if hd.granted() {
		t.Fatal("d took the slot kept for the hint view")
	}
	relH = acquireAsync(t, ctx, hint, false).take(t)
	relC()
	relD := hd.take(t)
	if _, inUse, _ := b.stats(); inUse != 2 {
		t.Fatalf("in use = %d, want 2", inUse)
	}
	relD()

	// Once the hint view leaves, its slot is everyone's again.
	relH()
	hint.leave()
	d.leave()
	relA = acquireAsync(t, ctx, a, false).take(t)
	relC = acquireAsync(t, ctx, c, false).take(t)
	relA()
	relC()
}

func TestBudgetGivesUpWaitingWhenCancelled(t *testing.T) {
	b := newBudget(2, time.Minute, zerolog.Nop())
	a, c, d := b.join("a", false), b.join("c", false), b.join("d", false)
	relA := acquireAsync(t, t.Context(), a, false).take(t)
	relC := acquireAsync(t, t.Context(), c, true).take(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan bool)
	go func() {
		_, ok := d.acquire(ctx, false)
		done <- ok
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(b.queued()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("d never queued")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if <-done {
		t.Fatal("acquire succeeded after its context ended")
	}
	relA()
	relC()
	if _, inUse, w := b.stats(); inUse != 0 || w != 0 {
		t.Fatalf("a cancelled wait leaked: %d in use, %d waiting", inUse, w)
	}
}

func TestBudgetWait(t *testing.T) {
	tests := []struct {
		slots, views int
		hint         bool
		full, want   time.Duration
	}{
		{slots: 64, views: 64, full: time.Minute, want: time.Minute},
		{slots: 64, views: 63, hint: true, full: time.Minute, want: time.Minute},
		// One slot for the hint view, one for hurried views, 62 for turns.
		{slots: 64, views: 64, hint: true, full: time.Minute, want: 60 * 62 * time.Second / 64},
		// The integration tests' shape: 1 slot for 25 views' turns.
		{slots: 3, views: 25, hint: true, full: time.Minute, want: 2400 * time.Millisecond},
		{slots: 64, views: 1000, hint: true, full: time.Minute, want: 3720 * time.Millisecond},
		// Without a hint view only the slot for hurried views is kept.
		{slots: 64, views: 1000, full: time.Minute, want: 3780 * time.Millisecond},
		// Too few slots to keep one for hurried views.
		{slots: 2, views: 5, hint: true, full: time.Minute, want: 12 * time.Second},
		{slots: 64, views: 100000, hint: true, full: time.Minute, want: 2 * time.Second},
		// Never longer than asked for, even when the floor is.
		{slots: 3, views: 25, hint: true, full: 300 * time.Millisecond, want: 300 * time.Millisecond},
		{slots: 3, views: 25, hint: true, full: 3 * time.Second, want: 2 * time.Second},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d slots %d views hint %v wait %v", tc.slots, tc.views, tc.hint, tc.full), func(t *testing.T) {
			b := newBudget(tc.slots, tc.full, zerolog.Nop())
			var m *member
			for i := range tc.views {
				m = b.join(fmt.Sprint(i), false)
			}
			var h *member
			if tc.hint {
				h = b.join("health_state", true)
			}
			if got := m.wait(tc.full); got != tc.want {
				t.Fatalf("wait = %v, want %v", got, tc.want)
			}
			if h != nil && h.wait(tc.full) != tc.full {
				t.Fatalf("the hint view's wait was shortened to %v", h.wait(tc.full))
			}
		})
	}
}

func TestBudgetHintTriesAreBounded(t *testing.T) {
	b := newBudget(2, time.Minute, zerolog.Nop())
	m := b.join("web", false)
	// next runs one query that returns index, reporting whether the hint
	// hurried it. With every slot free the grant is immediate; what matters
	// is whether the request counted as hurried.
	next := func(index uint64, stale bool) bool {
		b.mu.Lock()
		hurried := m.hinted != 0 && m.tries > 0
		b.mu.Unlock()
		rel, _ := m.acquire(t.Context(), false)
		rel()
		m.saw(index, stale)
		return hurried
	}
	if next(10, false) {
		t.Fatal("hurried without a hint")
	}
	m.poke(100)
	if !next(100, true) || next(100, true) {
		t.Fatal("a hint did not hurry exactly the next query, whose response reached it")
	}

	// A hint ahead of anything the view will read (the index of the whole
	// checks table, for a check that passes again): a stale read may lag,
	// so the view tries once more, then gives up.
	m.poke(500)
	var n int
	for range 5 {
		if next(90, true) {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("a hint the view never reaches hurried %d stale queries, want 2", n)
	}
	// A consistent read that started after the hint reflects it, whatever
	// its index says.
	m.poke(500)
	if !next(90, false) || next(90, false) {
		t.Fatal("a consistent read started after the hint did not settle it")
	}
	// But not one that was already in flight when the hint came.
	rel, _ := m.acquire(t.Context(), false)
	m.poke(500)
	rel()
	m.saw(90, false)
	if !next(90, false) {
		t.Fatal("a read in flight when the hint came settled it")
	}
}

func TestBudgetNeverExceedsItsSlots(t *testing.T) {
	b := newBudget(3, time.Minute, zerolog.Nop())
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	members := make([]*member, 40)
	for i := range members {
		members[i] = b.join(fmt.Sprint(i), i == 0)
	}
	var mu sync.Mutex
	var held, most int
	for _, m := range members {
		wg.Go(func() {
			for ctx.Err() == nil {
				rel, ok := m.acquire(ctx, rand.N(4) == 0)
				if !ok {
					return
				}
				mu.Lock()
				held++
				most = max(most, held)
				mu.Unlock()
				if rand.N(3) == 0 {
					members[rand.N(len(members))].poke(uint64(rand.N(100) + 1))
				}
				time.Sleep(time.Duration(rand.N(200)) * time.Microsecond)
				mu.Lock()
				held--
				mu.Unlock()
				rel()
				m.saw(uint64(rand.N(100)), rand.N(2) == 0)
			}
		})
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if s, inUse, _ := b.stats(); s != 3 || inUse > 3 {
			t.Fatalf("stats: %d slots, %d in use", s, inUse)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()
	if most > 3 || most < 2 {
		t.Fatalf("at most %d requests held slots at once, want 2 or 3", most)
	}
	if _, inUse, w := b.stats(); inUse != 0 || w != 0 {
		t.Fatalf("after stopping: %d in use, %d waiting", inUse, w)
	}
}

// logLines decodes zerolog JSON lines.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestBudgetLogsOversubscriptionOnce(t *testing.T) {
	var buf bytes.Buffer
	b := newBudget(3, time.Minute, zerolog.New(&buf))
	done := b.batch()
	var ms []*member
	for i := range 5 {
		ms = append(ms, b.join(fmt.Sprint(i), false))
	}
	ms = append(ms, b.join("health_state", true))
	done()
	b.join("more", false)
	lines := logLines(t, &buf)
	if len(lines) != 1 || lines[0]["level"] != "warn" || lines[0]["max_queries"] != 3.0 || lines[0]["views"] != 6.0 ||
		!strings.Contains(fmt.Sprint(lines[0]["remedy"]), "raise consul.max_queries and the agent's limits.http_max_conns_per_client, or watch fewer services") {
		t.Fatalf("logs = %v, want one warning with the numbers and the remedy", lines)
	}
	// 5 views take 12 s turns on one slot (the other is kept for hurried
	// reads): a round is a minute.
	if lines[0]["shortened_wait"] != 12000.0 || lines[0]["round"] != 60000.0 {
		t.Fatalf("turn %v ms, round %v ms; want 12000 and 60000", lines[0]["shortened_wait"], lines[0]["round"])
	}
	buf.Reset()
	for _, m := range ms[1:] {
		m.leave()
	}
	if lines := logLines(t, &buf); len(lines) != 1 || lines[0]["level"] != "info" {
		t.Fatalf("logs = %v, want one info line", lines)
	}
	buf.Reset()
	b.setQuiet(true)
	for range 5 {
		b.join("x", false)
	}
	if buf.Len() != 0 {
		t.Fatalf("a quiet budget logged %s", buf.String())
	}
}

// TestBudgetHintsOnlyWhenViewsOutnumberSlots: as many health views as
// slots each have a slot of their own, so no hint query runs (its slots
// would make the views take turns); one more and they take turns anyway.
// Budgets of 4 slots or more hint with the two status queries.
func TestBudgetHintsOnlyWhenViewsOutnumberSlots(t *testing.T) {
	for _, slots := range []int{3, 4, 128} {
		b := newBudget(slots, time.Minute, zerolog.Nop())
		if b.oversubscribedWith(slots) || !b.oversubscribedWith(slots+1) {
			t.Errorf("%d slots: oversubscribed with %d views %v, with %d %v; want false, true",
				slots, slots, b.oversubscribedWith(slots), slots+1, b.oversubscribedWith(slots+1))
		}
	}
	if got := hintStates(3); len(got) != 1 || got[0] != "any" {
		t.Errorf("hint states for 3 slots: %v, want the one filtered query", got)
	}
	if got := hintStates(4); len(got) != 2 || got[0] != "critical" || got[1] != "warning" {
		t.Errorf("hint states for 4 slots: %v, want critical and warning", got)
	}
}

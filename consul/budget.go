package consul

import (
	"container/list"
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// unbounded is the budget of a Watcher whose Config leaves MaxQueries
// zero: every view has a slot. The daemon always passes its setting
// (policy.DefaultMaxQueries unless configured), the one owner of that
// default.
const unbounded = math.MaxInt32

// minQueries is the smallest budget: one slot is kept for the health-hint
// query, and the other views need at least one to share.
const minQueries = 2

// statusHintSlots is the smallest budget that runs the two status-indexed
// hint queries (critical, warning) instead of one filtered query over every
// check: each keeps a slot, and the views still share two (see hintStates).
const statusHintSlots = 4

// minOversubscribedWait is the shortest blocking wait an oversubscribed
// budget hands out: below it, views would spend their slot time on
// round trips rather than on waiting for changes.
const minOversubscribedWait = 2 * time.Second

// budget shares a fixed number of query slots among all views of a Watcher.
// A request holds a slot from before it starts until its response returns,
// so the number of connections to the agent never exceeds the slots, however
// many services are watched. Views wait for a slot in arrival order, except
// that hurried ones (poked by a health hint, or about to make a read that
// does not block) go first.
//
// Slots are kept apart. The hint views' (one or two, see hintStates): they
// are what makes health changes visible for views that wait, so they must
// never wait behind them.
// The other matters only while more views take turns than there are slots:
// views waiting their turn then never take the last free slot, which is
// left for hurried views. Otherwise a poked view would still wait for a
// view in a blocking query to give its slot up, which takes up to a whole
// (shortened) wait; a hurried read returns at once, so that slot is nearly
// always free.
type budget struct {
	log      zerolog.Logger
	waitTime time.Duration

	mu     sync.Mutex
	slots  int
	inUse  int // every slot held, the hint views' included
	shared int // slots held by views other than the hint views
	// hurried and normal hold waiting *member, each in arrival order.
	hurried, normal list.List
	hints           int       // the joined hint views
	hintWaiters     []*member // hint views waiting for their slot
	views           int
	// followedViews counts the joined views of services a connected
	// proxy follows (setFollowed); followedHeld the slots they hold as
	// such, and followedQ holds them while they wait. See prioritised.
	followedViews int
	followedHeld  int
	followedQ     list.List
	pri           bool // prioritised() when the queues were last arranged
	over          bool
	quiet         bool // no more transition logs: the watcher is stopping
	batching      bool // joins and leaves of one change of targets are under way
}

func newBudget(slots int, waitTime time.Duration, log zerolog.Logger) *budget {
	if slots <= 0 {
		slots = unbounded
	}
	slots = max(slots, minQueries)
	return &budget{log: log, waitTime: waitTime, slots: slots}
}

// member is one view's place in a budget. Its fields are guarded by b.mu.
type member struct {
	b    *budget
	id   string
	hint bool

	ready   chan struct{} // receives one grant
	elem    *list.Element // in b.followedQ (inFollowed), b.hurried (hurried) or b.normal while waiting
	hurried bool
	// followed: a connected proxy follows the view's service;
	// inFollowed: it waits in b.followedQ; asFollowed: its slot was
	// granted from there.
	followed, inFollowed, asFollowed bool
	held                             bool
	left                             bool
	// hinted is the index a health hint says the view's data must reach, 0
	// if none; tries counts the queries it may still hurry.
	hinted uint64
	tries  int
	// pokes counts hints; startPokes is pokes when the request in flight
	// started.
	pokes, startPokes uint64
}

// join adds a view to the budget. The hint view is joined with hint set.
func (b *budget) join(id string, hint bool) *member {
	m := &member{b: b, id: id, hint: hint, ready: make(chan struct{}, 1)}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.views++
	if hint {
		b.hints++
	}
	b.checkOver()
	b.requeue() // one more view may start or end the followed views' priority
	b.pump()
	return m
}

// leave removes the view from the budget; it may be called more than once.
// A request in flight keeps its slot until it returns.
func (m *member) leave() {
	if m == nil {
		return
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if m.left {
		return
	}
	m.left = true
	b.views--
	if m.followed {
		b.followedViews--
	}
	if m.hint {
		b.hints--
	}
	b.dropHintWaiter(m)
	b.checkOver()
	b.requeue()
	b.pump() // slots kept apart may now go to the others
}

// setFollowed says whether a connected proxy follows the view's service.
func (m *member) setFollowed(followed bool) {
	if m == nil || m.hint {
		return
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if m.followed == followed || m.left {
		return
	}
	m.followed = followed
	if followed {
		b.followedViews++
	} else {
		b.followedViews--
	}
	b.checkOver()
	b.requeue()
	b.place(m)
	b.pump()
}

// prioritised reports whether the followed views keep slots of their own:
// when views take turns, a view of a service some proxy follows would
// otherwise wait its turn behind services nobody follows, and a change to
// it would be seen only through the health hint (one more query and one
// more round trip per change). It holds while they all fit with two slots
// left for the others (a turn and the express slot). b.mu must be held.
func (b *budget) prioritised() bool {
	slots, views := b.slots-b.hints, b.views-b.hints
	return b.followedViews > 0 && views > slots && b.followedViews <= slots-2
}

// requeue rearranges the waiting views when the followed views' priority
// starts or ends: while it holds, the followed ones wait in b.followedQ,
// otherwise among the others. It walks the queues only then, not on
// every join (thousands of views join at once). b.mu must be held.
func (b *budget) requeue() {
	pri := b.prioritised()
	if pri == b.pri {
		return
	}
	b.pri = pri
	for _, l := range []*list.List{&b.followedQ, &b.hurried, &b.normal} {
		for e := l.Front(); e != nil; {
			next := e.Next()
			b.place(e.Value.(*member))
			e = next
		}
	}
}

// place moves m, if it waits, to the queue it belongs in: b.followedQ
// while it is followed and followed views are prioritised, else among
// the others (at the back). b.mu must be held.
func (b *budget) place(m *member) {
	want := m.followed && b.pri
	if m.elem == nil || want == m.inFollowed {
		return
	}
	b.queueOf(m).Remove(m.elem)
	if want {
		m.elem, m.hurried, m.inFollowed = b.followedQ.PushBack(m), false, true
		return
	}
	m.elem, m.inFollowed = b.normal.PushBack(m), false
}

// rotation returns how many views take turns for how many slots, and
// whether one more slot is kept for hurried views. b.mu must be held.
func (b *budget) rotation() (slots, views int, express bool) {
	slots, views = b.slots-b.hints, b.views-b.hints
	if b.prioritised() {
		// The followed views each hold a slot of their own; the others
		// take turns for the rest.
		slots, views = slots-b.followedViews, views-b.followedViews
	}
	if views > slots && slots >= 2 {
		return slots - 1, views, true
	}
	return slots, views, false
}

// oversubscribedWith reports whether views health views would have to take
// turns: more of them than slots. Then the hint views are worth their
// slots; with as many views as slots or fewer each has a slot of its own
// and sees its changes itself, and starting hints there would only make
// the views take turns.
func (b *budget) oversubscribedWith(views int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return views > b.slots
}

// hintStates are the check states the hint views follow for a budget of
// slots: "critical" and "warning", each a query Consul answers from its
// index on check status (cost: the checks in that state), or with fewer
// than statusHintSlots slots one query for "any" state filtered to the
// checks that are not passing, which Consul answers by filtering every
// check in the datacenter on every check write (~45 ms of a server's CPU
// at 50,000 checks; bench/README.md). Consul's non-passing states are
// warning and critical (maintenance is a critical check).
func hintStates(slots int) []string {
	if slots >= statusHintSlots {
		return []string{"critical", "warning"}
	}
	return []string{"any"}
}

// dropHintWaiter forgets m as a waiting hint view. b.mu must be held.
func (b *budget) dropHintWaiter(m *member) {
	b.hintWaiters = slices.DeleteFunc(b.hintWaiters, func(w *member) bool { return w == m })
}

// checkOver logs when the budget becomes, or stops being, oversubscribed.
// b.mu must be held.
func (b *budget) checkOver() {
	if b.batching {
		return
	}
	slots, views, _ := b.rotation()
	over := views > slots
	if over == b.over {
		return
	}
	b.over = over
	if b.quiet {
		return
	}
	if over {
		// A round: every view taking turns has had one. Turns are never
		// shorter than minOversubscribedWait, so a round can outlast the
		// wait time.
		turn := b.waitLocked(b.waitTime)
		round := turn * time.Duration((views+slots-1)/max(slots, 1))
		b.log.Warn().Int("max_queries", b.slots).Int("views", b.views).Int("turn_slots", slots).
			Dur("wait_time", b.waitTime).Dur("shortened_wait", turn).Dur("round", round).
			Str("remedy", "raise consul.max_queries and the agent's limits.http_max_conns_per_client, or watch fewer services").
			Msg("consul watcher oversubscribed: more blocking queries than query slots, so they take turns; a change other than a health change to a service waiting its turn can take up to round to be seen")
		return
	}
	b.log.Info().Int("max_queries", b.slots).Int("views", b.views).
		Msg("consul watcher no longer oversubscribed: every blocking query has a slot")
}

// batch holds back oversubscription checks until the returned func is
// called, so that a batch of joins and leaves is judged once.
func (b *budget) batch() (done func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batching = true
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.batching = false
		b.checkOver()
	}
}

// setQuiet stops transition logs, so that a stopping watcher, whose views
// leave one by one, does not report that it is no longer oversubscribed.
func (b *budget) setQuiet(q bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.quiet = q
}

// wait returns how long the view's next blocking query may block. When more
// views take turns than there are slots, each turn is shortened so that
// every view gets one within about full.
func (m *member) wait(full time.Duration) time.Duration {
	if m == nil || m.hint {
		return full
	}
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	if m.followed && m.b.prioritised() {
		return full // its slot is its own
	}
	return m.b.waitLocked(full)
}

func (b *budget) waitLocked(full time.Duration) time.Duration {
	slots, views, _ := b.rotation()
	if views <= slots || slots <= 0 {
		return full
	}
	w := time.Duration(int64(full) * int64(slots) / int64(views))
	return min(max(w, min(minOversubscribedWait, full)), full)
}

// acquire waits for a slot, reporting false if ctx ended first. hurry puts
// the view ahead of the views waiting in arrival order; so does a health
// hint the view has not yet seen. release must be called once the response
// has returned.
func (m *member) acquire(ctx context.Context, hurry bool) (release func(), ok bool) {
	if m == nil {
		return func() {}, ctx.Err() == nil
	}
	b := m.b
	b.mu.Lock()
	// A hint hurries the view's next query. If that query's response is
	// still behind the hint, the one after goes first among the views
	// waiting their turn, but not through the slot kept for hurried reads:
	// it may well block, as a hint's index can be ahead of anything the
	// view will read. Then the hint is spent.
	retry := false
	if m.hinted != 0 && m.tries > 0 {
		m.tries--
		hurry = hurry || m.tries == 1
		retry = m.tries == 0
	}
	switch {
	case m.hint:
		b.hintWaiters = append(b.hintWaiters, m)
	case m.followed && b.prioritised():
		m.elem, m.hurried, m.inFollowed = b.followedQ.PushBack(m), false, true
	case hurry:
		m.elem, m.hurried = b.hurried.PushBack(m), true
	case retry:
		m.elem, m.hurried = b.normal.PushFront(m), false
	default:
		m.elem, m.hurried = b.normal.PushBack(m), false
	}
	b.pump()
	b.mu.Unlock()

	select {
	case <-m.ready:
		return m.release, true
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case m.held:
		// Granted while ctx ended: give it back.
		<-m.ready
		m.releaseLocked()
	case m.elem != nil:
		b.queueOf(m).Remove(m.elem)
		m.elem, m.inFollowed = nil, false
	case m.hint:
		b.dropHintWaiter(m)
	}
	return nil, false
}

// queueOf is the list waiting m is in.
func (b *budget) queueOf(m *member) *list.List {
	switch {
	case m.inFollowed:
		return &b.followedQ
	case m.hurried:
		return &b.hurried
	}
	return &b.normal
}

func (m *member) release() {
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	m.releaseLocked()
}

func (m *member) releaseLocked() {
	if !m.held {
		return
	}
	m.held = false
	m.b.inUse--
	if !m.hint {
		m.b.shared--
	}
	if m.asFollowed {
		m.asFollowed = false
		m.b.followedHeld--
	}
	m.b.pump()
}

// pump hands free slots to waiting views; b.mu must be held.
func (b *budget) pump() {
	for b.inUse < b.slots {
		if len(b.hintWaiters) > 0 {
			m := b.hintWaiters[0]
			b.hintWaiters = b.hintWaiters[1:]
			b.grant(m)
			continue
		}
		shareable := b.slots - b.hints // what the views other than the hint views may hold
		if e := b.followedQ.Front(); e != nil && b.shared < shareable {
			// Prioritised (requeue empties the list otherwise): each
			// followed view has a slot of its own, kept free of turns.
			b.followedQ.Remove(e)
			m := e.Value.(*member)
			m.elem, m.inFollowed, m.asFollowed = nil, false, true
			b.shared++
			b.followedHeld++
			b.grant(m)
			continue
		}
		slots, _, express := b.rotation()
		hurriedSlots := slots
		if express {
			hurriedSlots++
		}
		// The slots held in turns: all but the followed views' own,
		// while they have them.
		others := b.shared
		if b.prioritised() {
			others -= b.followedHeld
		}
		var e *list.Element
		switch {
		case b.shared >= shareable:
			// Followed views no longer followed may still hold slots
			// granted as their own: never more than the budget.
			return
		case b.hurried.Len() > 0 && others < hurriedSlots:
			e = b.hurried.Front()
			b.hurried.Remove(e)
		case b.normal.Len() > 0 && others < slots:
			e = b.normal.Front()
			b.normal.Remove(e)
		default:
			return
		}
		m := e.Value.(*member)
		m.elem = nil
		b.shared++
		b.grant(m)
	}
}

func (b *budget) grant(m *member) {
	m.held = true
	m.startPokes = m.pokes
	b.inUse++
	m.ready <- struct{}{}
}

// poke records that a health hint saw the view's service change at index:
// a view waiting for a slot moves ahead of the views waiting in arrival
// order, and a view that is not waiting does so when it next asks for one.
// A view inside a blocking query needs nothing: that query sees the change.
func (m *member) poke(index uint64) {
	if m == nil || index == 0 {
		return
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	m.hinted = max(m.hinted, index)
	m.pokes++
	// The next query, and one more if its response is still behind the
	// hint (a stale server lagging, say); see acquire.
	m.tries = 2
	if m.elem != nil && !m.hurried && !m.inFollowed {
		b.normal.Remove(m.elem)
		m.elem, m.hurried = b.hurried.PushBack(m), true
		m.tries--
		b.pump()
	}
}

// saw records the index of a successful response. The hint is done with
// once the response reaches its index; or, unless the read was stale, once
// the request started after the hint arrived: a consistent read reflects
// everything up to the moment it was made, and a hint's index can be ahead
// of what the service's own index will ever show (the index of a check that
// left the response is not known, only that of the whole checks table).
func (m *member) saw(index uint64, stale bool) {
	if m == nil {
		return
	}
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	if index >= m.hinted || m.tries == 0 || !stale && m.startPokes == m.pokes {
		m.hinted, m.tries = 0, 0
	}
}

// stats returns the slots, how many are held and how many views wait.
func (b *budget) stats() (slots, inUse, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	waiting = b.followedQ.Len() + b.hurried.Len() + b.normal.Len() + len(b.hintWaiters)
	return b.slots, b.inUse, waiting
}

// queued returns the ids of the waiting views in the order they will be
// served, for tests.
func (b *budget) queued() (waiting []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.hintWaiters {
		waiting = append(waiting, m.id)
	}
	for _, l := range []*list.List{&b.followedQ, &b.hurried, &b.normal} {
		for e := l.Front(); e != nil; e = e.Next() {
			waiting = append(waiting, e.Value.(*member).id)
		}
	}
	return waiting
}

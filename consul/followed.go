package consul

import "maps"

// SetFollowed names the services some connected proxy follows. While
// there are more health views than query slots, so that views take turns
// (consul.max_queries), the views of these services keep a slot of their
// own and block for the whole wait time: a change to a service proxies
// follow is then seen by its own query at once, not after its turn or
// through the health hint. It applies while they fit beside two slots for
// the views taking turns; otherwise all take turns as before. Safe from
// any goroutine; setting the same set again does nothing.
func (w *Watcher) SetFollowed(keys []ServiceKey) {
	set := make(map[ServiceKey]bool, len(keys))
	for _, k := range keys {
		set[k] = true
	}
	w.mu.Lock()
	same := maps.Equal(w.followed, set)
	if !same {
		w.followed = set
	}
	w.mu.Unlock()
	if same {
		return
	}
	signal(w.retarget)
}

func (w *Watcher) currentFollowed() map[ServiceKey]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.followed
}

// Oversubscribed reports whether the health views take turns for query
// slots: only then does SetFollowed change anything.
func (w *Watcher) Oversubscribed() bool {
	w.slots.mu.Lock()
	defer w.slots.mu.Unlock()
	return w.slots.over
}

// OwnSlots counts the followed services whose views keep a slot of their
// own: 0 unless views take turns and the followed ones fit (SetFollowed).
func (w *Watcher) OwnSlots() int {
	w.slots.mu.Lock()
	defer w.slots.mu.Unlock()
	if !w.slots.prioritised() {
		return 0
	}
	return w.slots.followedViews
}

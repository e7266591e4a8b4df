package cache

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/server/stream/v3"
)

// TestSubscriptionFollowsGoControlPlane: the bridge's subscription keeps
// what go-control-plane's does (the names, the wildcard, what the stream
// holds) through random sequences of SotW and delta requests, legacy and
// explicit wildcard, unsubscribing while wildcard, and names that come
// back.
func TestSubscriptionFollowsGoControlPlane(t *testing.T) {
	alphabet := []string{"*", "a", "b", "c", "d", "e"}
	pick := func(r *rand.Rand) []string {
		var out []string
		for range r.IntN(4) {
			out = append(out, alphabet[r.IntN(len(alphabet))])
		}
		return out
	}
	held := func(r *rand.Rand) map[string]string {
		m := map[string]string{}
		for _, n := range alphabet[1:] {
			if r.IntN(2) == 0 {
				m[n] = "v" + n
			}
		}
		return m
	}
	same := func(t *testing.T, step string, ours *Subscription, theirs *stream.Subscription) {
		t.Helper()
		if ours.IsWildcard() != theirs.IsWildcard() {
			t.Fatalf("%s: wildcard %v, go-control-plane %v", step, ours.IsWildcard(), theirs.IsWildcard())
		}
		if got, want := ours.SubscribedResources(), theirs.SubscribedResources(); !maps.Equal(got, want) {
			t.Fatalf("%s: names %v, go-control-plane %v", step, got, want)
		}
		if got, want := ours.ReturnedResources(), theirs.ReturnedResources(); !maps.Equal(got, want) {
			t.Fatalf("%s: held %v, go-control-plane %v", step, got, want)
		}
	}
	for seed := range uint64(3000) {
		r := rand.New(rand.NewPCG(seed, 7))
		if seed%2 == 0 { // SotW
			first := pick(r)
			ours, theirs := NewSotwSubscription(first), stream.NewSotwSubscription(first, true)
			same(t, "sotw first", ours, &theirs)
			for step := range 8 {
				h := held(r)
				ours.SetReturnedResources(maps.Clone(h))
				theirs.SetReturnedResources(maps.Clone(h))
				names := pick(r)
				ours.SetNames(names)
				theirs.SetResourceSubscription(names)
				same(t, fmt.Sprintf("seed %d, sotw step %d %v", seed, step, names), ours, &theirs)
			}
			continue
		}
		sub, unsub, h := pick(r), pick(r), held(r)
		ours := NewDeltaSubscription(sub, unsub, maps.Clone(h))
		theirs := stream.NewDeltaSubscription(sub, unsub, maps.Clone(h), true)
		same(t, "delta first", ours, &theirs)
		for step := range 8 {
			sub, unsub := pick(r), pick(r)
			ours.Update(sub, unsub)
			theirs.UpdateResourceSubscriptions(sub, unsub)
			same(t, fmt.Sprintf("seed %d, delta step %d +%v -%v", seed, step, sub, unsub), ours, &theirs)
		}
	}
}

// TestSubscriptionsShareTheirNames: streams that subscribe the same names,
// in any order and by any route, hold one set; a change of names makes a
// new set and leaves the others' as they were.
func TestSubscriptionsShareTheirNames(t *testing.T) {
	a := NewSotwSubscription([]string{"x", "y", "z"})
	b := NewSotwSubscription([]string{"z", "x", "y"})
	c := NewDeltaSubscription([]string{"y"}, nil, nil)
	c.Update([]string{"x", "z"}, nil)
	if a.names == nil || a.names != b.names || a.names != c.names {
		t.Fatalf("equal subscriptions hold different sets: %p %p %p", a.names, b.names, c.names)
	}
	c.Update(nil, []string{"y"})
	if a.names == c.names || len(a.SubscribedResources()) != 3 {
		t.Fatalf("unsubscribing edited the shared set: %v", a.SubscribedResources())
	}
	if _, ok := c.SubscribedResources()["y"]; ok || len(c.SubscribedResources()) != 2 {
		t.Fatalf("names after unsubscribing y: %v", c.SubscribedResources())
	}
}

// TestUnusedNameSetsAreForgotten: once no subscription holds a set of
// names, the table lets it go, so clients naming ever new resources do
// not grow it.
func TestUnusedNameSetsAreForgotten(t *testing.T) {
	names := make([][]string, 100)
	for i := range names {
		names[i] = []string{"gone-" + strconv.Itoa(i)}
	}
	// The table's entries, collected or not, under this test's sets'
	// digests: what only this test put there.
	count := func() int {
		nameSets.mu.Lock()
		defer nameSets.mu.Unlock()
		n := 0
		for _, ns := range names {
			n += len(nameSets.sets[DigestNames(ns)])
		}
		return n
	}
	subs := make([]*Subscription, 0, len(names))
	for _, ns := range names {
		subs = append(subs, NewSotwSubscription(ns))
	}
	if n := count(); n != len(names) {
		t.Fatalf("%d sets interned, want %d", n, len(names))
	}
	runtime.KeepAlive(subs)
	subs = nil
	deadline := time.Now().Add(10 * time.Second)
	for count() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sets still interned after their subscriptions went, want 0", count())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFirstSubscriptionFindsTheSharedSet: a stream's first request naming
// what another stream's set holds takes that set without building one
// (no allocation), in any order; duplicates or a different set never
// take a set that differs.
func TestFirstSubscriptionFindsTheSharedSet(t *testing.T) {
	held := map[string]string{}
	first := NewDeltaSubscription([]string{"shared-a", "shared-b"}, nil, held)
	second := NewDeltaSubscription([]string{"shared-b", "shared-a"}, nil, held)
	if first.names == nil || second.names != first.names {
		t.Fatal("the same names in another order did not share the set")
	}
	if n := testing.AllocsPerRun(100, func() {
		var s Subscription
		s.initDelta([]string{"shared-a", "shared-b"}, nil, held)
	}); n != 0 {
		t.Errorf("subscribing a shared set took %v allocations, want 0", n)
	}
	dup := NewDeltaSubscription([]string{"shared-a", "shared-a"}, nil, held)
	if got := dup.SubscribedResources(); len(got) != 1 || dup.names == first.names {
		t.Errorf("names with a duplicate subscribed %v", got)
	}
	other := NewDeltaSubscription([]string{"shared-a", "shared-c"}, nil, held)
	if got := other.SubscribedResources(); other.names == first.names || len(got) != 2 {
		t.Errorf("other names subscribed %v", got)
	}
	wild := NewDeltaSubscription([]string{"*", "shared-a"}, nil, held)
	if !wild.IsWildcard() {
		t.Error("the wildcard among names was lost")
	}

	// SotW likewise, and a set taken so still forgets what the stream
	// holds of names it no longer wants.
	sotw := NewSotwSubscription([]string{"shared-b", "shared-a"})
	if sotw.names != first.names {
		t.Error("a SotW subscription of the same names did not share the set")
	}
	if n := testing.AllocsPerRun(100, func() { sotw.SetNames([]string{"shared-a", "shared-b"}) }); n != 0 {
		t.Errorf("naming a shared set again took %v allocations, want 0", n)
	}
	sotw.SetReturnedResources(map[string]string{"shared-a": "1", "gone": "2"})
	sotw.SetNames([]string{"shared-a", "shared-b"})
	if _, kept := sotw.ReturnedResources()["gone"]; kept || sotw.ReturnedResources()["shared-a"] != "1" {
		t.Errorf("held after renaming: %v", sotw.ReturnedResources())
	}
}

// TestHoldingNothingIsNoMap: a new subscription holds nothing without a
// map of its own (the first answer gives it one), and unsubscribing a
// name still wanted through the wildcard marks it held at no version.
func TestHoldingNothingIsNoMap(t *testing.T) {
	if s := NewSotwSubscription([]string{"a"}); s.ReturnedResources() != nil {
		t.Error("a new SotW subscription made a map for what it holds")
	}
	s := NewDeltaSubscription([]string{"*", "a"}, nil, nil)
	if s.ReturnedResources() != nil {
		t.Error("a new delta subscription made a map for what it holds")
	}
	s.Update(nil, []string{"a"})
	if v, ok := s.ReturnedResources()["a"]; !ok || v != "" {
		t.Errorf("a name unsubscribed under the wildcard: held %q %v, want at no version", v, ok)
	}
}

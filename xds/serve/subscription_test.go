package serve

import (
	"maps"
	"math/rand/v2"
	"runtime"
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
	same := func(t *testing.T, step string, ours *subscription, theirs *stream.Subscription) {
		t.Helper()
		if ours.IsWildcard() != theirs.IsWildcard() {
			t.Fatalf("%s: wildcard %v, go-control-plane %v", step, ours.IsWildcard(), theirs.IsWildcard())
		}
		if got, want := ours.SubscribedResources(), theirs.SubscribedResources(); len(got) != len(want) || (len(got) > 0 && !maps.Equal(got, want)) {
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
			ours, theirs := newSotwSubscription(first), stream.NewSotwSubscription(first, true)
			same(t, "sotw first", ours, &theirs)
			for step := range 8 {
				h := held(r)
				ours.SetReturnedResources(maps.Clone(h))
				theirs.SetReturnedResources(maps.Clone(h))
				names := pick(r)
				ours.setNames(names)
				theirs.SetResourceSubscription(names)
				same(t, "sotw step "+string(rune('0'+step))+" "+stringsOf(names), ours, &theirs)
			}
			continue
		}
		sub, unsub, h := pick(r), pick(r), held(r)
		ours := newDeltaSubscription(sub, unsub, maps.Clone(h))
		theirs := stream.NewDeltaSubscription(sub, unsub, maps.Clone(h), true)
		same(t, "delta first", ours, &theirs)
		for step := range 8 {
			sub, unsub := pick(r), pick(r)
			ours.update(sub, unsub)
			theirs.UpdateResourceSubscriptions(sub, unsub)
			same(t, "delta step "+string(rune('0'+step))+" +"+stringsOf(sub)+" -"+stringsOf(unsub), ours, &theirs)
		}
	}
}

func stringsOf(names []string) string {
	out := "["
	for i, n := range names {
		if i > 0 {
			out += " "
		}
		out += n
	}
	return out + "]"
}

// TestSubscriptionsShareTheirNames: streams that subscribe the same names,
// in any order and by any route, hold one set; a change of names makes a
// new set and leaves the others' as they were.
func TestSubscriptionsShareTheirNames(t *testing.T) {
	a := newSotwSubscription([]string{"x", "y", "z"})
	b := newSotwSubscription([]string{"z", "x", "y"})
	c := newDeltaSubscription([]string{"y"}, nil, nil)
	c.update([]string{"x", "z"}, nil)
	if a.names == nil || a.names != b.names || a.names != c.names {
		t.Fatalf("equal subscriptions hold different sets: %p %p %p", a.names, b.names, c.names)
	}
	c.update(nil, []string{"y"})
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
	// The sets of this test's names the table holds, collected or not.
	count := func() int {
		nameSets.mu.Lock()
		defer nameSets.mu.Unlock()
		n := 0
		for _, l := range nameSets.sets {
			for _, wp := range l {
				if ns := wp.Value(); ns == nil {
					n++ // collected, its entry not dropped yet
				} else if hasGone(ns.m) {
					n++
				}
			}
		}
		return n
	}
	runtime.GC()
	runtime.GC()
	before := count()
	subs := make([]*subscription, 0, 100)
	for i := range 100 {
		subs = append(subs, newSotwSubscription([]string{"gone-" + string(rune('a'+i%26)) + string(rune('a'+i/26))}))
	}
	if n := count(); n < before+100 {
		t.Fatalf("%d sets interned, want at least %d", n, before+100)
	}
	runtime.KeepAlive(subs)
	subs = nil
	deadline := time.Now().Add(10 * time.Second)
	for count() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d sets still interned after their subscriptions went, want %d", count(), before)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

func hasGone(m map[string]struct{}) bool {
	for n := range m {
		if len(n) > 5 && n[:5] == "gone-" {
			return true
		}
	}
	return false
}

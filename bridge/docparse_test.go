package bridge

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/jonboulle/clockwork"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// stallingParser is a docParser whose parses of documents containing
// "slow" block until release is closed; parses counts every real parse.
func stallingParser(clock clockwork.Clock) (*docParser, *atomic.Int32, chan struct{}) {
	p := newDocParser(clock, ParseBudget)
	var parses atomic.Int32
	release := make(chan struct{})
	p.parse = func(name string, src []byte, fromKV bool) (*policy.Document, hcl.Diagnostics) {
		parses.Add(1)
		if strings.Contains(string(src), "slow") {
			<-release
		}
		return policy.Parse(name, src)
	}
	return p, &parses, release
}

func TestDocParserParsesEachVersionOnce(t *testing.T) {
	p, parses, _ := stallingParser(clockwork.NewFakeClock())
	a, b := []byte("export_all_services = true\n"), []byte("export_all_services = false\n")
	for range 3 {
		if _, diags := p.Parse("consul:policy/a", a, true); diags.HasErrors() {
			t.Fatal(diags)
		}
		p.endRead()
	}
	if n := parses.Load(); n != 1 {
		t.Fatalf("an unchanged document was parsed %d times in three reads, want once", n)
	}
	p.Parse("consul:policy/a", b, true)
	p.Parse("consul:policy/b", a, true) // same content, other key: its own entry
	if n := parses.Load(); n != 3 {
		t.Fatalf("parses = %d after a changed document and a new key, want 3", n)
	}
	// Versions unused for two reads are forgotten: the cache stays one
	// version per source however often a key changes.
	p.endRead()
	p.Parse("consul:policy/a", b, true)
	p.endRead()
	p.Parse("consul:policy/a", b, true)
	p.endRead()
	if n := len(p.cache); n != 1 {
		t.Fatalf("cache holds %d entries, want 1 (only the current version of the one key still read)", n)
	}
}

func TestDocParserRejectsADocumentOverBudget(t *testing.T) {
	clock := clockwork.NewFakeClock()
	p, parses, release := stallingParser(clock)
	slow := []byte("# slow\nexport_all_services = true\n")
	type result struct{ diags hcl.Diagnostics }
	got := make(chan result, 1)
	go func() { _, diags := p.Parse("consul:policy/slow", slow, true); got <- result{diags} }()
	if err := clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(ParseBudget - time.Millisecond)
	select {
	case <-got:
		t.Fatal("rejected before the budget ran out")
	case <-time.After(50 * time.Millisecond):
	}
	clock.Advance(time.Millisecond)
	var r result
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("a parse over budget was still waited for")
	}
	if !r.diags.HasErrors() || !strings.Contains(r.diags[0].Summary, "too long to parse") || r.diags[0].Subject.Filename != "consul:policy/slow" {
		t.Fatalf("diagnostics = %v, want a too-long-to-parse error naming the key", r.diags)
	}
	// The verdict is remembered: the same content is not parsed again.
	if _, diags := p.Parse("consul:policy/slow", slow, true); !diags.HasErrors() || parses.Load() != 1 {
		t.Fatalf("second read: diags %v, %d parses; want the remembered rejection and no new parse", diags, parses.Load())
	}
	// The abandoned parse still holds the one parse slot: another new
	// document waits for it rather than adding a second busy core.
	other := make(chan hcl.Diagnostics, 1)
	go func() {
		_, diags := p.Parse("consul:policy/ok", []byte("export_all_services = true\n"), true)
		other <- diags
	}()
	select {
	case <-other:
		t.Fatal("a second parse ran while an abandoned one was still running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case diags := <-other:
		if diags.HasErrors() {
			t.Fatal(diags)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the next parse never ran after the abandoned one finished")
	}
}

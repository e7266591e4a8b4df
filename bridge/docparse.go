package bridge

import (
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/jonboulle/clockwork"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// ParseBudget is how long one policy document may take to parse. Real
// policies parse in milliseconds (a 1 MiB one in well under 100 ms); HCL
// that takes seconds is hostile or broken (thousands of unclosed template
// directives in a heredoc cost HCL quadratic time), and is rejected with a
// diagnostic rather than allowed to hold a reload.
const ParseBudget = 2 * time.Second

// maxSlowVerdicts bounds how many over-budget documents are remembered
// (so that each is parsed once, not on every KV change).
const maxSlowVerdicts = 64

// docParser parses policy documents for the loop, off its goroutine:
//   - a document whose name and content were parsed before is not parsed
//     again (a KV change re-parses only the changed key);
//   - one parse runs at a time, so hostile documents use at most one core,
//     whatever the rate of KV writes;
//   - a parse that outlives the budget is abandoned (HCL cannot be
//     interrupted; it finishes in the background, holding the one parse
//     slot) and the document rejected, and that verdict is remembered.
type docParser struct {
	clock  clockwork.Clock
	budget time.Duration
	// parse is policy.Parse or policy.ParseKV; tests replace it.
	parse func(name string, src []byte, fromKV bool) (*policy.Document, hcl.Diagnostics)
	slot  chan struct{}

	mu    sync.Mutex
	cache map[parseKey]*parsed
	slow  []parseKey // over-budget verdicts in cache, oldest first
	// read counts finished reads; an entry not used in the last two is
	// dropped, so the cache holds about one version per source.
	read uint64
}

type parseKey struct {
	name   string
	fromKV bool
	sum    [sha256.Size]byte
}

type parsed struct {
	doc      *policy.Document
	diags    hcl.Diagnostics
	slow     bool
	lastRead uint64
}

func newDocParser(clock clockwork.Clock, budget time.Duration) *docParser {
	return &docParser{
		clock: clock, budget: budget, slot: make(chan struct{}, 1), cache: map[parseKey]*parsed{},
		parse: func(name string, src []byte, fromKV bool) (*policy.Document, hcl.Diagnostics) {
			if fromKV {
				return policy.ParseKV(name, src)
			}
			return policy.Parse(name, src)
		},
	}
}

// Parse returns the document parsed from src, from the cache when the
// same name had the same content before. Documents are never modified
// after parsing (Merge only reads them), so sharing one is safe.
func (p *docParser) Parse(name string, src []byte, fromKV bool) (*policy.Document, hcl.Diagnostics) {
	doc, diags, _ := p.parseWithin(name, src, fromKV, nil)
	return doc, diags
}

// ParseWithin is Parse that waits at most wait for the parse slot (an
// abandoned over-budget parse may hold it) and otherwise returns busy.
func (p *docParser) ParseWithin(name string, src []byte, fromKV bool, wait time.Duration) (*policy.Document, hcl.Diagnostics, bool) {
	t := p.clock.NewTimer(wait)
	defer t.Stop()
	return p.parseWithin(name, src, fromKV, t.Chan())
}

func (p *docParser) parseWithin(name string, src []byte, fromKV bool, giveUp <-chan time.Time) (*policy.Document, hcl.Diagnostics, bool) {
	k := parseKey{name: name, fromKV: fromKV, sum: sha256.Sum256(src)}
	p.mu.Lock()
	if r, ok := p.cache[k]; ok {
		r.lastRead = p.read
		p.mu.Unlock()
		return r.doc, r.diags, false
	}
	p.mu.Unlock()
	select {
	case p.slot <- struct{}{}:
	case <-giveUp:
		return nil, nil, true
	}
	done := make(chan *parsed, 1)
	go func() {
		defer func() { <-p.slot }()
		doc, diags := p.parse(name, src, fromKV)
		done <- &parsed{doc: doc, diags: diags}
	}()
	timeout := p.clock.NewTimer(p.budget)
	defer timeout.Stop()
	var r *parsed
	select {
	case r = <-done:
	case <-timeout.Chan():
		r = &parsed{slow: true, diags: hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Document takes too long to parse",
			Detail: fmt.Sprintf("Parsing %d bytes took over %s, the limit for one policy document; "+
				"HCL this slow is usually thousands of unclosed template directives (%%{ or ${) or a huge heredoc. Fix or split the document.", len(src), p.budget),
			Subject: &hcl.Range{Filename: name},
		}}}
	}
	p.store(k, r)
	return r.doc, r.diags, false
}

func (p *docParser) store(k parseKey, r *parsed) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r.lastRead = p.read
	p.cache[k] = r
	if r.slow {
		p.slow = append(p.slow, k)
		if len(p.slow) > maxSlowVerdicts {
			delete(p.cache, p.slow[0])
			p.slow = p.slow[1:]
		}
	}
}

// endRead ends one read of all sources: documents used in neither this
// read nor the one before are forgotten; over-budget verdicts stay (up to
// maxSlowVerdicts), so a hostile document is not parsed again.
func (p *docParser) endRead() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, r := range p.cache {
		if !r.slow && r.lastRead+1 < p.read {
			delete(p.cache, k)
		}
	}
	p.read++
}

package configentry

import (
	"crypto/sha256"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// Rejected is an entry left out of the translation: Consul accepted it,
// but the policy it translates to is invalid. Diagnostics are what the
// policy said, without positions in documents the entry shares with
// others (an ingress gateway's document holds its services' routers).
type Rejected struct {
	Entry       string // "service-router/web"
	Diagnostics []string
}

func (r Rejected) String() string {
	return r.Entry + ": rejected, not served until it is fixed (every other entry and the HCL keep applying): " + strings.Join(r.Diagnostics, "; ")
}

// blameOrder is the order entries are suspected in when the documents do
// not validate: first those whose content is copied into other entries'
// documents (a router's routes into its ingress gateway's virtual host),
// so that the entry that wrote the bad value is the one left out, not
// the gateway that carries it.
var blameOrder = []string{api.ServiceRouter, api.ServiceSplitter, api.HTTPRoute, api.TCPRoute, api.ServiceResolver, api.ServiceDefaults, api.IngressGateway, api.APIGateway}

// Checked is ToHCL with every entry the policy cannot take left out: the
// documents are parsed and merged alone (as KV documents, the way the
// bridge loads them), and while that has errors, the first entry (in
// blameOrder, then by name) whose removal, with the entries before it,
// leaves fewer errors is found by bisection and, if removing it alone
// leaves fewer errors too, left out. So one entry Consul accepts but the
// bridge cannot serve (a path_regex Go's RE2 refuses, say) is rejected
// alone and named, instead of holding back every other entry and every
// HCL change; finding it takes about log2(entries) checks. What no single
// entry explains (a conflict with the HCL files is not checked here)
// stays in the documents for the policy to report.
func Checked(e Entries) ([]Document, []Note, []Rejected) {
	c := &checker{parsed: map[[32]byte]parsedDoc{}}
	docs, notes := ToHCL(e)
	errs := c.errorsOf(docs)
	var rejected []Rejected
	for len(errs) > 0 {
		id, ok := c.culprit(e, entryIDs(e), len(errs))
		if !ok {
			break
		}
		e = e.without(id)
		tdocs, tnotes := ToHCL(e)
		terrs := c.errorsOf(tdocs)
		rejected = append(rejected, Rejected{Entry: id, Diagnostics: gone(errs, terrs)})
		docs, notes, errs = tdocs, tnotes, terrs
	}
	return docs, notes, rejected
}

// checker parses each distinct document once across the trials.
type checker struct {
	parsed map[[32]byte]parsedDoc
}

type parsedDoc struct {
	doc   *policy.Document
	diags hcl.Diagnostics
}

// culprit is the first of ids whose removal, with the ids before it,
// leaves fewer than n errors (bisection: removing more entries rarely
// adds errors), confirmed by removing it alone; else the first id whose
// removal alone does.
func (c *checker) culprit(e Entries, ids []string, n int) (string, bool) {
	fewer := func(drop ...string) bool {
		docs, _ := ToHCL(e.without(drop...))
		return len(c.errorsOf(docs)) < n
	}
	lo, hi := 0, len(ids) // removing ids[:lo] does not help; ids[:hi] does
	if hi == 0 || !fewer(ids...) {
		return "", false
	}
	for hi-lo > 1 {
		if mid := (lo + hi) / 2; fewer(ids[:mid]...) {
			hi = mid
		} else {
			lo = mid
		}
	}
	if fewer(ids[hi-1]) {
		return ids[hi-1], true
	}
	for _, id := range ids {
		if fewer(id) {
			return id, true
		}
	}
	return "", false
}

// errorsOf parses and merges documents alone and returns their errors,
// each as "summary: detail" without its position (positions in generated
// documents would point at whichever entry's document carried the value).
func (c *checker) errorsOf(docs []Document) []string {
	var diags hcl.Diagnostics
	var parsed []*policy.Document
	for _, d := range docs {
		k := sha256.Sum256([]byte(d.Name + "\x00" + string(d.Source)))
		p, ok := c.parsed[k]
		if !ok {
			p.doc, p.diags = policy.ParseKV(d.Name, d.Source)
			c.parsed[k] = p
		}
		diags = append(diags, p.diags...)
		if p.doc != nil {
			parsed = append(parsed, p.doc)
		}
	}
	if !diags.HasErrors() {
		_, ds := policy.Merge(parsed...)
		diags = append(diags, ds...)
	}
	var out []string
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			out = append(out, strings.TrimSuffix(d.Summary+": "+d.Detail, ": "))
		}
	}
	return out
}

// gone lists the errors of before that after no longer has.
func gone(before, after []string) []string {
	left := slices.Clone(after)
	var out []string
	for _, b := range before {
		if i := slices.Index(left, b); i >= 0 {
			left = slices.Delete(left, i, i+1)
			continue
		}
		out = append(out, b)
	}
	return out
}

// entryIDs lists "kind/name" of every entry in blame order.
func entryIDs(e Entries) []string {
	byKind := map[string][]string{
		api.ServiceRouter:   sortedKeys(e.Routers),
		api.ServiceSplitter: sortedKeys(e.Splitters),
		api.HTTPRoute:       sortedKeys(e.HTTPRoutes),
		api.TCPRoute:        sortedKeys(e.TCPRoutes),
		api.ServiceResolver: sortedKeys(e.Resolvers),
		api.ServiceDefaults: sortedKeys(e.Defaults),
		api.IngressGateway:  sortedKeys(e.Ingress),
		api.APIGateway:      sortedKeys(e.APIGateways),
	}
	var out []string
	for _, kind := range blameOrder {
		for _, name := range byKind[kind] {
			out = append(out, kind+"/"+name)
		}
	}
	return out
}

// without is e less some entries ("kind/name"); e itself is not changed.
func (e Entries) without(ids ...string) Entries {
	drop := map[string][]string{}
	for _, id := range ids {
		kind, name, _ := strings.Cut(id, "/")
		drop[kind] = append(drop[kind], name)
	}
	e.Defaults = dropped(e.Defaults, drop[api.ServiceDefaults])
	e.Resolvers = dropped(e.Resolvers, drop[api.ServiceResolver])
	e.Splitters = dropped(e.Splitters, drop[api.ServiceSplitter])
	e.Routers = dropped(e.Routers, drop[api.ServiceRouter])
	e.Ingress = dropped(e.Ingress, drop[api.IngressGateway])
	e.APIGateways = dropped(e.APIGateways, drop[api.APIGateway])
	e.HTTPRoutes = dropped(e.HTTPRoutes, drop[api.HTTPRoute])
	e.TCPRoutes = dropped(e.TCPRoutes, drop[api.TCPRoute])
	return e
}

// dropped is m without keys ks: a copy if any is dropped.
func dropped[V any](m map[string]V, ks []string) map[string]V {
	if len(ks) == 0 {
		return m
	}
	m = maps.Clone(m)
	for _, k := range ks {
		delete(m, k)
	}
	return m
}

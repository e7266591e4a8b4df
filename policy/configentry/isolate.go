package configentry

import (
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
// blameOrder, then by name) whose removal leaves fewer errors is removed.
// So one entry Consul accepts but the bridge cannot serve (a path_regex
// Go's RE2 refuses, say) is rejected alone and named, instead of holding
// back every other entry and every HCL change. What no single entry
// explains (a conflict with the HCL files is not checked here) stays in
// the documents for the policy to report.
func Checked(e Entries) ([]Document, []Note, []Rejected) {
	docs, notes := ToHCL(e)
	errs := errorsOf(docs)
	if len(errs) == 0 {
		return docs, notes, nil
	}
	var rejected []Rejected
	for len(errs) > 0 {
		found := false
		for _, id := range entryIDs(e) {
			try := e.without(id)
			tdocs, tnotes := ToHCL(try)
			terrs := errorsOf(tdocs)
			if len(terrs) >= len(errs) {
				continue
			}
			rejected = append(rejected, Rejected{Entry: id, Diagnostics: gone(errs, terrs)})
			e, docs, notes, errs, found = try, tdocs, tnotes, terrs, true
			break
		}
		if !found {
			break
		}
	}
	return docs, notes, rejected
}

// errorsOf parses and merges documents alone and returns their errors,
// each as "summary: detail" without its position (positions in generated
// documents would point at whichever entry's document carried the value).
func errorsOf(docs []Document) []string {
	var diags hcl.Diagnostics
	var parsed []*policy.Document
	for _, d := range docs {
		doc, ds := policy.ParseKV(d.Name, d.Source)
		diags = append(diags, ds...)
		if doc != nil {
			parsed = append(parsed, doc)
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

// without is e less one entry ("kind/name"); e itself is not changed.
func (e Entries) without(id string) Entries {
	kind, name, _ := strings.Cut(id, "/")
	switch kind {
	case api.ServiceDefaults:
		e.Defaults = dropped(e.Defaults, name)
	case api.ServiceResolver:
		e.Resolvers = dropped(e.Resolvers, name)
	case api.ServiceSplitter:
		e.Splitters = dropped(e.Splitters, name)
	case api.ServiceRouter:
		e.Routers = dropped(e.Routers, name)
	case api.IngressGateway:
		e.Ingress = dropped(e.Ingress, name)
	case api.APIGateway:
		e.APIGateways = dropped(e.APIGateways, name)
	case api.HTTPRoute:
		e.HTTPRoutes = dropped(e.HTTPRoutes, name)
	case api.TCPRoute:
		e.TCPRoutes = dropped(e.TCPRoutes, name)
	}
	return e
}

// dropped is a copy of m without key k.
func dropped[V any](m map[string]V, k string) map[string]V {
	m = maps.Clone(m)
	delete(m, k)
	return m
}

// Package configentry translates Consul's own L7 config entries
// (service-defaults, service-resolver, service-splitter, service-router,
// ingress-gateway, and api-gateway with its http-route and tcp-route
// entries) into policy HCL: the `import` command prints it, and a
// bridge with consul.config_entries serves it as policy documents named
// after the entries they come from ("consul-config:service-resolver/web"),
// so diagnostics and conflicts with hand-written HCL name the entry. What
// has no equivalent is dropped and said so in a Note. Pure: no I/O.
package configentry

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/hcl/v2/hclwrite"
)

// Entries are the config entries of one Consul, by kind and name.
type Entries struct {
	Defaults  map[string]*api.ServiceConfigEntry
	Resolvers map[string]*api.ServiceResolverConfigEntry
	Splitters map[string]*api.ServiceSplitterConfigEntry
	Routers   map[string]*api.ServiceRouterConfigEntry
	Ingress   map[string]*api.IngressGatewayConfigEntry
	// API gateways and the routes attached to them.
	APIGateways map[string]*api.APIGatewayConfigEntry
	HTTPRoutes  map[string]*api.HTTPRouteConfigEntry
	TCPRoutes   map[string]*api.TCPRouteConfigEntry
	// Mesh says the bridge serves Connect sidecars: routers and splitters
	// of HTTP services then also become mesh_routes, the routes sidecars'
	// upstreams take, as in Consul's own mesh.
	Mesh bool
}

// Add files an entry under its kind; other kinds are reported.
func (e *Entries) Add(entry api.ConfigEntry) error {
	switch c := entry.(type) {
	case *api.ServiceConfigEntry:
		setIn(&e.Defaults, c.Name, c)
	case *api.ServiceResolverConfigEntry:
		setIn(&e.Resolvers, c.Name, c)
	case *api.ServiceSplitterConfigEntry:
		setIn(&e.Splitters, c.Name, c)
	case *api.ServiceRouterConfigEntry:
		setIn(&e.Routers, c.Name, c)
	case *api.IngressGatewayConfigEntry:
		setIn(&e.Ingress, c.Name, c)
	case *api.APIGatewayConfigEntry:
		setIn(&e.APIGateways, c.Name, c)
	case *api.HTTPRouteConfigEntry:
		setIn(&e.HTTPRoutes, c.Name, c)
	case *api.TCPRouteConfigEntry:
		setIn(&e.TCPRoutes, c.Name, c)
	case *api.ServiceIntentionsConfigEntry:
		return fmt.Errorf("%s %q: intentions are not policy; a bridge with a mesh block follows them from Consul as its sidecars' RBAC", entry.GetKind(), entry.GetName())
	case *api.ProxyConfigEntry, *api.MeshConfigEntry, *api.ExportedServicesConfigEntry, *api.TerminatingGatewayConfigEntry:
		return fmt.Errorf("%s %q: a service mesh setting the bridge's policy has no equivalent for; not translated", entry.GetKind(), entry.GetName())
	default:
		return fmt.Errorf("%s %q: not a kind the bridge reads (service-defaults, service-resolver, service-splitter, service-router, ingress-gateway, api-gateway, http-route, tcp-route)", entry.GetKind(), entry.GetName())
	}
	return nil
}

func setIn[T any](m *map[string]T, k string, v T) {
	if *m == nil {
		*m = map[string]T{}
	}
	(*m)[k] = v
}

// Kinds are the config entry kinds read, in the order documents are made.
var Kinds = []string{api.ServiceDefaults, api.ServiceResolver, api.ServiceSplitter, api.ServiceRouter, api.IngressGateway, api.APIGateway, api.HTTPRoute, api.TCPRoute}

// Document is one policy document made from entries: Name is its
// location in diagnostics, Source HCL.
type Document struct {
	Name   string
	Source []byte
}

// Note is something of an entry that was dropped or approximated.
type Note struct {
	Entry string // "service-resolver/web"
	Text  string
}

func (n Note) String() string { return n.Entry + ": " + n.Text }

// DocPrefix starts the name of every document made from config entries.
const DocPrefix = "consul-config:"

// ToHCL translates entries into policy documents: one per service with a
// service-defaults or service-resolver entry (its service block), one per
// ingress gateway (a proxy group of that name), and one per gRPC service
// with a router or splitter (a grpc_service block, for proxyless
// clients). Routers and splitters of HTTP services reached through an
// ingress gateway are part of its document.
func ToHCL(e Entries) ([]Document, []Note) {
	t := &translator{e: e}
	t.entrySpaces()
	var docs []Document
	for _, name := range serviceNames(e) {
		if d := t.serviceDoc(name); d != nil {
			docs = append(docs, *d)
		}
	}
	for _, name := range sortedKeys(e.Ingress) {
		if d := t.ingressDoc(e.Ingress[name]); d != nil {
			docs = append(docs, *d)
		}
	}
	for _, name := range sortedKeys(e.APIGateways) {
		if d := t.apiGatewayDoc(e.APIGateways[name]); d != nil {
			docs = append(docs, *d)
		}
	}
	docs = append(docs, t.routeDocs()...)
	for _, name := range sortedKeys(e.Routers) {
		if !t.usedRouters[name] {
			t.note(api.ServiceRouter, name, "not applied: no ingress-gateway entry exposes the service, its service-defaults protocol is not grpc, and the policy has no mesh (routing between sidecars needs a mesh block) or the protocol is not http, http2 or grpc")
		}
	}
	for _, name := range sortedKeys(e.Splitters) {
		if !t.usedSplitters[name] {
			t.note(api.ServiceSplitter, name, "not applied: no ingress-gateway entry or grpc router reaches the service")
		}
	}
	slices.SortStableFunc(t.notes, func(a, b Note) int { return strings.Compare(a.Entry, b.Entry) })
	// A target reached by a router and its splitter is noted once.
	return docs, compactNotes(t.notes)
}

type translator struct {
	e     Entries
	notes []Note
	// mesh is set while mesh_routes and chain blocks are written: a
	// subset whose filter has no equivalent is dropped there (with a
	// note) rather than refusing the entry.
	mesh bool
	// expanded is set while an ingress gateway's routes are written: they
	// are the chain already, so they say chain = false.
	expanded      bool
	usedRouters   map[string]bool
	usedSplitters map[string]bool
}

func (t *translator) note(kind, name, format string, args ...any) {
	t.notes = append(t.notes, Note{Entry: kind + "/" + name, Text: fmt.Sprintf(format, args...)})
}

// otherSpace names a namespace and partition other than the default
// ("" or "default", as Consul Enterprise returns them on every entry):
// "" when both are the default. The bridge reads one namespace and
// partition, so a reference elsewhere reaches the same-named service in
// its own catalog, not the one Consul routes to.
func otherSpace(namespace, partition string) string {
	var out []string
	if namespace != "" && namespace != "default" {
		out = append(out, fmt.Sprintf("namespace %q", namespace))
	}
	if partition != "" && partition != "default" {
		out = append(out, fmt.Sprintf("partition %q", partition))
	}
	return strings.Join(out, ", ")
}

// entrySpaces notes the entries that live in another namespace or
// partition: Consul applies them to that namespace's services, the
// bridge to the same-named ones it reads.
func (t *translator) entrySpaces() {
	var all []api.ConfigEntry
	all = appendEntries(all, t.e.Defaults)
	all = appendEntries(all, t.e.Resolvers)
	all = appendEntries(all, t.e.Splitters)
	all = appendEntries(all, t.e.Routers)
	all = appendEntries(all, t.e.Ingress)
	all = appendEntries(all, t.e.APIGateways)
	all = appendEntries(all, t.e.HTTPRoutes)
	all = appendEntries(all, t.e.TCPRoutes)
	for _, c := range all {
		if sp := otherSpace(c.GetNamespace(), c.GetPartition()); sp != "" {
			t.note(c.GetKind(), c.GetName(), "the entry is in another namespace or partition (%s), which is not translated; the bridge applies it to the same-named services in its own catalog instead", sp)
		}
	}
}

// appendEntries appends m's entries, by name, to out.
func appendEntries[E api.ConfigEntry](out []api.ConfigEntry, m map[string]E) []api.ConfigEntry {
	for _, k := range sortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}

func serviceNames(e Entries) []string {
	set := map[string]bool{}
	for n := range e.Defaults {
		set[n] = true
	}
	for n := range e.Resolvers {
		set[n] = true
	}
	return sortedKeys(set)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// render formats a file and names it after the entries it came from.
func render(f *hclwrite.File, entries ...string) Document {
	return Document{Name: DocPrefix + strings.Join(entries, ","), Source: hclwrite.Format(f.Bytes())}
}

// protocol is a service's protocol from its service-defaults ("tcp" if
// none, as in Consul).
func (t *translator) protocol(svc string) string {
	if d := t.e.Defaults[svc]; d != nil && d.Protocol != "" {
		return strings.ToLower(d.Protocol)
	}
	return "tcp"
}

// compactNotes drops repeats of a note (same entry, same text), keeping
// the first; notes are sorted by entry, texts in the order written.
func compactNotes(notes []Note) []Note {
	seen := map[Note]bool{}
	return slices.DeleteFunc(notes, func(n Note) bool {
		if seen[n] {
			return true
		}
		seen[n] = true
		return false
	})
}

package bridge

import (
	"slices"
	"sync"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/configentry"
)

// configEntries is the loop's view of Consul's config entries as policy
// (consul.config_entries): documents made by configentry, merged with the
// files and KV documents under the same rules, so a service an entry and
// a file both define is an error naming the entry.
type configEntries struct {
	// needed: nothing is served before the first read, as with KV.
	needed bool
	// mesh: the policy serves Connect sidecars, so routers and splitters
	// of HTTP services also become mesh_routes.
	mesh    bool
	updates <-chan consul.ConfigEntriesUpdate
	docs    *configDocs
	// last are the policy kinds' entries docs was made from.
	last []api.ConfigEntry
	// log reports entries rejected alone (they are also warnings on
	// /v1/policy).
	log zerolog.Logger
}

// configDocs is one translation of the entries. The loop makes it from
// an update at once (cheap); the translation itself, which parses and
// merges every entry's document and isolates a bad one by bisection,
// runs on first use, in the read off the loop (reload.go), so a large or
// hostile set of entries never holds a health flip. Once made it never
// changes.
type configDocs struct {
	entries configentry.Entries
	added   []configentry.Note // entries Add refused
	log     zerolog.Logger

	once     sync.Once
	docs     []configentry.Document
	notes    []configentry.Note
	rejected []configentry.Rejected
}

func (c *configEntries) waiting() bool { return c.needed && c.docs == nil }

func (c *configEntries) set(u consul.ConfigEntriesUpdate) {
	e, notes := configentry.Collect(u.Entries, c.mesh)
	c.docs = &configDocs{entries: e, added: notes, log: c.log}
}

// translated makes the documents once: an entry whose translation the
// policy refuses is left out alone and named, and the other entries and
// the HCL keep applying.
func (cd *configDocs) translated() *configDocs {
	cd.once.Do(func() {
		docs, more, rejected := configentry.Checked(cd.entries)
		for _, r := range rejected {
			cd.log.Error().Str("entry", r.Entry).Strs("diagnostics", r.Diagnostics).
				Msg("config entry rejected: Consul accepted it but the bridge cannot translate it; it is not served until fixed, the other entries and the HCL keep applying")
		}
		cd.docs, cd.notes, cd.rejected = docs, append(slices.Clip(cd.added), more...), rejected
	})
	return cd
}

// parseConfigDocs parses the entries' documents (as KV documents: policy
// only) and turns each note into a warning at its entry, shown on
// /v1/policy: an entry the bridge cannot fully translate is reported, and
// the rest keeps serving.
func (l *loop) parseConfigDocs(ce *configDocs) ([]*policy.Document, hclDiagnostics, []SourceStatus) {
	var (
		docs    []*policy.Document
		diags   hclDiagnostics
		sources []SourceStatus
	)
	ce = ce.translated()
	for _, d := range ce.docs {
		doc, ds := l.parser.Parse(d.Name, d.Source, true)
		diags = append(diags, ds...)
		if doc != nil {
			docs = append(docs, doc)
		}
		sources = append(sources, SourceStatus{Name: d.Name, Kind: "config-entry", Hash: hash(d.Source)})
	}
	diags = append(diags, configentry.Warnings(ce.notes, ce.rejected)...)
	return docs, diags, sources
}

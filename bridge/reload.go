package bridge

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/consul"
	"github.com/consul-xds-bridge/consul-xds-bridge/pipeline"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy"
)

// The reload path: the policy's sources (files, KV documents, config
// entries) are read and parsed off the loop, then tried on the loop: a
// candidate is accepted only if the world it would serve computes
// cleanly (the gate), and a rejected one changes nothing served.

// policyRead is the result of reading and parsing every policy source.
type policyRead struct {
	trigger string
	files   []fileRead
	kv      *consul.KVUpdate
	docs    []*policy.Document
	diags   hclDiagnostics
	sources []SourceStatus
	// merged: docs were merged into cfg (nil if that failed) and the
	// files cfg names read, off the loop (see prepare in files.go).
	merged bool
	cfg    *policy.Config
	// readFiles, if set, replaces policy.ReadFiles (tests stall it).
	readFiles func(*policy.Policy, time.Time) hclDiagnostics
	// xds are the daemon's xDS settings, which decide whether the policy
	// may serve private keys (policy.CheckKeyTransport).
	xds policy.XDSSettings
}

// reloadPolicy merges the files with the latest KV documents and config
// entries. It reads the files again only after the file watcher or SIGHUP
// asked (filesChanged); otherwise it reuses them as last read. A policy with any error is rejected whole and the last good
// one keeps serving. Before any policy with the KV documents was accepted
// there is no last good one: the bridge then serves the last accepted
// versions of the broken documents from the state file, or stays unready
// (and answers no proxy) naming what is wrong.
func (l *loop) reloadPolicy(trigger string) {
	if trigger == "files" {
		l.filesChanged = true
	}
	if l.kvNeeded && l.kvDocs == nil || l.ce.waiting() {
		return // the first KV (or config entries) read will load everything
	}
	if l.reading {
		l.rereadTrigger = trigger
		return
	}
	l.reading = true
	kv, ce, files := l.kvDocs, l.ce.docs, l.files
	if l.filesChanged {
		files, l.filesChanged = nil, false
	}
	names := l.d.cfg.ConfigFiles
	go func() {
		if files == nil {
			files = readConfigFiles(names)
		}
		docs, diags, sources := l.readDocuments(files, kv, ce)
		r := policyRead{trigger: trigger, files: files, kv: kv, docs: docs, diags: diags, sources: sources, readFiles: l.readFiles, xds: l.d.cfg.Settings.XDS}
		r.prepare(l.d.clock.Now())
		l.readDone <- r
	}()
}

// applyRead tries the policy a read produced and accepts or rejects it.
func (l *loop) applyRead(r policyRead) {
	trigger := r.trigger
	l.files = r.files // what the disk held, accepted or not
	try := l.tryDocuments(r)
	if try.diags.HasErrors() && l.kvNeeded && !l.kvAccepted {
		if fallback, replaced := l.fromKVState(brokenKeys(try.diags)); fallback != nil && !fallback.diags.HasErrors() {
			l.accept(trigger, *fallback)
			l.reject(trigger, try) // shown on /v1/policy until fixed
			l.d.log.Warn().Strs("keys", replaced).Str("state_dir", l.d.cfg.Settings.Consul.StateDir).
				Msg("KV policy documents rejected at start; serving their last accepted versions")
			l.setStatus(func(st *PolicyStatus) {
				st.PolicyWarnings = append(st.PolicyWarnings, fmt.Sprintf("serving the last accepted versions of %s from %s, kept since before this start",
					strings.Join(replaced, ", "), filepath.Join(l.d.cfg.Settings.Consul.StateDir, kvStateFile)))
			})
			return
		}
		l.reject(trigger, try)
		l.setStatus(func(st *PolicyStatus) {
			st.Waiting = "the policy (files and KV documents) was rejected at start and no last accepted version of the KV documents could be served (consul.state_dir); no proxy is answered until it is fixed: " +
				strings.Join(st.LastError.Diagnostics, "; ")
		})
		return
	}
	if try.diags.HasErrors() {
		l.reject(trigger, try)
		return
	}
	l.accept(trigger, try)
}

// attempt is one policy tried: from the files and the KV documents kv.
type attempt struct {
	cfg     *policy.Config
	docs    []*policy.Document
	kv      *consul.KVUpdate
	diags   hclDiagnostics
	sources []SourceStatus
	// memo is the daemon's memo forked for this attempt, holding what
	// the gate translated; adopted only if the attempt is accepted.
	memo *pipeline.Memo
}

// tryPolicy reads, merges, validates and translates a policy. It is
// accepted only if it can be served: its TLS files read, and built and
// translated against the current catalog, every resource valid.
func (l *loop) tryPolicy(kv *consul.KVUpdate) attempt {
	if l.files == nil {
		l.files = readConfigFiles(l.d.cfg.ConfigFiles)
	}
	docs, diags, sources := l.readDocuments(l.files, kv, l.ce.docs)
	return l.tryDocuments(policyRead{kv: kv, docs: docs, diags: diags, sources: sources})
}

// tryDocuments is tryPolicy on documents already read.
func (l *loop) tryDocuments(r policyRead) attempt {
	if !r.merged {
		r.xds = l.d.cfg.Settings.XDS
		r.prepare(l.d.clock.Now()) // tryPolicy's read, on the loop at start
	}
	// prepare merged the documents, refused keys the xDS settings do not
	// protect and read the files the policy names.
	a := attempt{kv: r.kv, diags: r.diags, sources: r.sources, docs: r.docs, cfg: r.cfg}
	if a.diags.HasErrors() {
		return a
	}
	cfg := r.cfg
	// The gate computes exactly what a build would serve (the mesh's
	// data joined), on a fork of the daemon's memo: a rejected candidate
	// leaves the served memory as it was; an accepted one's fork becomes
	// the daemon's, so the build after it reuses this work.
	var cat *consul.Catalog
	if l.catalog != nil {
		cat = l.mesh.withMesh(l.catalog.Catalog)
	}
	a.memo = l.memo.Fork()
	compute := pipeline.Compute
	if l.compute != nil {
		compute = l.compute
	}
	w, err := compute(pipeline.Input{Catalog: cat, Policy: cfg.Policy, Datacenter: l.d.cfg.Settings.Consul.Datacenter}, a.memo)
	a.diags = append(a.diags, pipeline.DiagnoseExcept(w, err, cfg.Policy, l.failing)...)
	return a
}

// fromKVState tries the current KV documents with the broken ones
// replaced by their versions from the state file, then the state file's
// documents alone; nil if there is no state file.
func (l *loop) fromKVState(broken map[string]bool) (*attempt, []string) {
	dir := l.d.cfg.Settings.Consul.StateDir
	if dir == "" {
		return nil, nil
	}
	st, err := loadKVState(dir, l.d.cfg.Settings.Consul.KVPrefix)
	if err != nil {
		l.d.log.Error().Err(err).Msg("cannot read the KV state file; ignoring it")
	}
	if st == nil {
		return nil, nil
	}
	patched, replaced := patchKV(l.kvDocs, st, broken)
	if len(replaced) > 0 {
		if a := l.tryPolicy(patched); !a.diags.HasErrors() {
			return &a, replaced
		}
	}
	whole := l.tryPolicy(&consul.KVUpdate{Documents: st.Documents})
	var keys []string
	for _, d := range st.Documents {
		keys = append(keys, d.Key)
	}
	return &whole, keys
}

func (l *loop) accept(trigger string, a attempt) {
	cfg := a.cfg
	if !reflect.DeepEqual(cfg.Settings, l.d.cfg.Settings) {
		l.d.log.Warn().Msg("daemon settings (consul, xds, admin, log blocks) changed; restart to apply them")
	}
	l.policy = cfg.Policy
	l.docs = a.docs
	if a.memo != nil {
		l.memo = a.memo
	}
	l.noteWhat(consul.Change{}) // a new policy may change anything
	if l.kvNeeded {
		l.kvAccepted = true
		if dir := l.d.cfg.Settings.Consul.StateDir; dir != "" {
			if err := saveKVState(dir, l.d.cfg.Settings.Consul.KVPrefix, a.kv.Documents); err != nil {
				l.d.log.Error().Err(err).Str("state_dir", dir).Msg("cannot write the KV state file; a restart with a broken KV document would not be served")
			}
		}
	}
	if why := l.mesh.restartNeeded(cfg.Policy); why != "" {
		l.d.log.Warn().Str("reason", why).Msg("mesh settings changed; restart to apply them")
	}
	l.d.watchPolicyFiles(cfg.Policy)
	l.watcher.SetTargets(l.mesh.watchTargets(cfg.Policy))
	// mesh_routes may name services no sidecar dials: follow them.
	l.setMeshTargets(cfg.Policy) // gateways.go
	l.recordPolicy(append(a.sources, tlsSources(cfg.Policy)...), a.diags)
	l.d.metrics.reloads.WithLabelValues("ok").Inc()
	l.d.log.Info().Str("trigger", trigger).Int("sources", len(a.sources)).Msg("policy loaded")
	l.schedule()
}

func (l *loop) reject(trigger string, a attempt) {
	// Keep watching the files of the rejected policy too, so that
	// fixing (or creating) the file it could not use reloads by itself.
	var attempted *policy.Policy
	if a.cfg != nil {
		attempted = a.cfg.Policy
	}
	l.d.watchPolicyFiles(l.policy, attempted)
	lines := policy.FormatDiagnostics(a.diags)
	l.d.metrics.reloads.WithLabelValues("failed").Inc()
	l.d.log.Error().Str("trigger", trigger).Strs("diagnostics", lines).Msg("policy rejected; keeping the last good policy")
	l.setStatus(func(st *PolicyStatus) {
		st.LastError = &ReloadError{At: l.d.clock.Now(), Diagnostics: lines}
		st.FailedReloads++
	})
}

// fileRead is one configuration file as read: its contents or why not.
type fileRead struct {
	path string
	src  []byte
	err  error
}

// readConfigFiles reads the configuration files, each bounded.
func readConfigFiles(paths []string) []fileRead {
	out := make([]fileRead, 0, len(paths))
	for _, f := range paths {
		src, err := policy.ReadBoundedFile(context.Background(), f, policy.MaxDocumentBytes)
		out = append(out, fileRead{path: f, src: src, err: err})
	}
	return out
}

// readDocuments parses every source: the configuration files as read
// (files), the KV documents and the config entries. It runs off the
// loop's goroutine (see reloadPolicy), so it uses only what does not
// change under it: its arguments and the parser.
func (l *loop) readDocuments(files []fileRead, kv *consul.KVUpdate, ce *configDocs) ([]*policy.Document, hclDiagnostics, []SourceStatus) {
	var (
		docs    []*policy.Document
		diags   hclDiagnostics
		sources []SourceStatus
	)
	for _, fr := range files {
		f, src := fr.path, fr.src
		if fr.err != nil {
			diags = append(diags, readError(f, fr.err))
			continue
		}
		doc, ds := l.parser.Parse(f, src, false)
		diags = append(diags, ds...)
		if doc != nil {
			docs = append(docs, doc)
		}
		sources = append(sources, SourceStatus{Name: f, Kind: "file", Hash: hash(src)})
	}
	if kv != nil {
		for _, r := range kv.Rejected {
			diags = append(diags, kvRejected(r))
		}
		for _, kd := range kv.Documents {
			doc, ds := l.parser.Parse(kd.Key, kd.Value, true)
			diags = append(diags, ds...)
			if doc != nil {
				docs = append(docs, doc)
			}
			sources = append(sources, SourceStatus{Name: kd.Key, Kind: "kv", Hash: hash(kd.Value), ModifyIndex: kd.ModifyIndex})
		}
	}
	if ce != nil {
		d, ds, src := l.parseConfigDocs(ce)
		docs, diags, sources = append(docs, d...), append(diags, ds...), append(sources, src...)
	}
	l.parser.endRead()
	return docs, diags, sources
}

// tlsSources lists the certificate and CA files of a policy with their
// SHA-256, so /v1/policy shows which certificate is being served. Key
// files are left out: not even a digest of a key is shown.
func tlsSources(p *policy.Policy) []SourceStatus {
	var out []SourceStatus
	seen := map[string]bool{}
	for _, f := range p.Files() {
		if f.Kind == policy.PEMPrivateKey || seen[f.Path] || f.PEM == nil {
			continue
		}
		seen[f.Path] = true
		out = append(out, SourceStatus{Name: f.Path, Kind: "certificate", Hash: hash(f.PEM)})
	}
	return out
}

func (l *loop) recordPolicy(sources []SourceStatus, diags hclDiagnostics) {
	l.setStatus(func(st *PolicyStatus) {
		st.Waiting = ""
		st.LoadedAt = l.d.clock.Now()
		st.Sources = sources
		st.LastError = nil
		st.SuccessfulReloads++
		st.PolicyWarnings = policy.FormatDiagnostics(diags)
	})
}

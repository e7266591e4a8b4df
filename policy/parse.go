package policy

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// Limits on policy input. KV documents are untrusted input, and a policy
// past these sizes is almost certainly a generator gone wrong; each limit
// is reported as a diagnostic, never a crash or a slow build.
const (
	MaxDocumentBytes     = 1 << 20
	MaxListenersPerGroup = 256
	MaxRoutesPerListener = 5000
)

// Document is one parsed HCL source (a file or a KV key), not yet merged.
type Document struct {
	Name string
	// FromKV marks a document read from Consul KV: it may hold routing
	// policy only, never daemon settings.
	FromKV bool

	consul         *consulBlock
	xds            *xdsBlock
	admin          *adminBlock
	log            *logBlock
	exportAll      *bool
	exportAllRange hcl.Range
	unmatched      *string
	unmatchedRange hcl.Range
	services       []*serviceBlock
	proxies        []*proxyBlock
	grpcServices   []*grpcServiceBlock
	routeTests     []*routeTestBlock
	mesh           *meshBlock
	meshRoutes     []*meshRoutesBlock
	chains         []*chainBlock
}

type documentSchema struct {
	Consul            *consulBlock        `hcl:"consul,block"`
	XDS               *xdsBlock           `hcl:"xds,block"`
	Admin             *adminBlock         `hcl:"admin,block"`
	Log               *logBlock           `hcl:"log,block"`
	ExportAllServices *bool               `hcl:"export_all_services,optional"`
	UnmatchedNodes    *string             `hcl:"unmatched_nodes,optional"`
	Services          []*serviceBlock     `hcl:"service,block"`
	Proxies           []*proxyBlock       `hcl:"proxy,block"`
	GRPCServices      []*grpcServiceBlock `hcl:"grpc_service,block"`
	RouteTests        []*routeTestBlock   `hcl:"route_test,block"`
	Mesh              *meshBlock          `hcl:"mesh,block"`
	MeshRoutes        []*meshRoutesBlock  `hcl:"mesh_routes,block"`
	Chains            []*chainBlock       `hcl:"chain,block"`
	Body              hcl.Body            `hcl:",body"`
}

// Parse decodes one HCL document. name is what diagnostics call it (a file
// path or a KV key). It does no I/O.
func Parse(name string, src []byte) (*Document, hcl.Diagnostics) {
	if len(src) > MaxDocumentBytes {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Document too large",
			Detail:   fmt.Sprintf("%d bytes is over the limit of %d; split the policy into several files or KV keys.", len(src), MaxDocumentBytes),
			Subject:  &hcl.Range{Filename: name},
		}}
	}
	if diags := CheckNesting(name, src); diags.HasErrors() {
		return nil, diags
	}
	f, diags := hclparse.NewParser().ParseHCL(src, name)
	if diags.HasErrors() {
		return nil, diags
	}
	diags = append(diags, checkNumbers(f.Body)...)
	if diags.HasErrors() {
		return nil, diags
	}
	var raw documentSchema
	diags = append(diags, gohcl.DecodeBody(f.Body, nil, &raw)...)
	if diags.HasErrors() {
		return nil, diags
	}
	d := &Document{
		Name: name, consul: raw.Consul, xds: raw.XDS, admin: raw.Admin, log: raw.Log,
		exportAll: raw.ExportAllServices, unmatched: raw.UnmatchedNodes, services: raw.Services, proxies: raw.Proxies,
		grpcServices: raw.GRPCServices, routeTests: raw.RouteTests, mesh: raw.Mesh, meshRoutes: raw.MeshRoutes, chains: raw.Chains,
	}
	if d.exportAll != nil {
		d.exportAllRange = valueRange(raw.Body, "export_all_services", hcl.Range{Filename: name})
	}
	if d.unmatched != nil {
		d.unmatchedRange = valueRange(raw.Body, "unmatched_nodes", hcl.Range{Filename: name})
	}
	return d, diags
}

// maxNumberExp bounds number literals to about float64's range. No setting
// needs more, and decoding a number like 1e1000000000 into a string
// attribute (which gohcl does by converting it) would print all its digits:
// seconds of CPU and gigabytes of memory from a dozen bytes of input.
const maxNumberExp = 1100

// checkNumbers rejects number literals outside ±2^maxNumberExp (other than
// zero) before anything converts them.
func checkNumbers(body hcl.Body) hcl.Diagnostics {
	sb, ok := body.(*hclsyntax.Body)
	if !ok {
		return nil
	}
	var diags hcl.Diagnostics
	hclsyntax.VisitAll(sb, func(n hclsyntax.Node) hcl.Diagnostics {
		lit, ok := n.(*hclsyntax.LiteralValueExpr)
		if !ok || lit.Val.Type() != cty.Number || !lit.Val.IsKnown() || lit.Val.IsNull() {
			return nil
		}
		f := lit.Val.AsBigFloat()
		if exp := f.MantExp(nil); f.IsInf() || (f.Sign() != 0 && (exp > maxNumberExp || exp < -maxNumberExp)) {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Number out of range",
				Detail:   "This number is far outside what any setting takes (ports, counts, weights, percentages); write a value within the range of a 64-bit float.",
				Subject:  lit.SrcRange.Ptr(),
			})
		}
		return nil
	})
	return diags
}

// ParseKV decodes a policy document stored in Consul KV under key. Daemon
// settings are rejected there: they must not change under a running daemon
// by a KV write.
func ParseKV(key string, src []byte) (*Document, hcl.Diagnostics) {
	d, diags := Parse(key, src)
	if d == nil {
		return nil, diags
	}
	d.FromKV = true
	for _, b := range []struct {
		block string
		rng   *hcl.Range
	}{{"consul", rangeOf(d.consul)}, {"xds", rangeOf(d.xds)}, {"admin", rangeOf(d.admin)}, {"log", rangeOf(d.log)}} {
		if block, rng := b.block, b.rng; rng != nil {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Daemon settings in KV",
				Detail:   fmt.Sprintf("A %s block may only appear in -config files; KV documents hold routing policy (service, proxy and grpc_service blocks).", block),
				Subject:  rng,
			})
		}
	}
	// Whether the daemon follows Consul Connect (sidecar registrations,
	// intentions, leaves) is decided once, at start, from the -config
	// files: in KV a mesh block or sidecar_for would be served by plan and
	// a reload, and lost at the next restart, or the other way round.
	if d.mesh != nil {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "mesh in KV",
			Detail:   "A mesh block may only appear in -config files: the bridge decides at start, from its files, whether it follows Consul Connect. Move it to a -config file and restart.",
			Subject:  d.mesh.DefRange.Ptr(),
		})
	}
	for _, p := range d.proxies {
		if p.SidecarFor != nil {
			rng := valueRange(p.Body, "sidecar_for", p.DefRange)
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "sidecar_for in KV",
				Detail:   fmt.Sprintf("proxy %q: sidecar_for may only appear in -config files: the bridge decides at start, from its files, whether it follows Consul Connect. Move the proxy block to a -config file and restart.", p.Name),
				Subject:  rng.Ptr(),
			})
		}
	}
	if diags.HasErrors() {
		return nil, diags
	}
	return d, diags
}

func rangeOf[T interface{ defRange() hcl.Range }](b T) *hcl.Range {
	var zero T
	if any(b) == any(zero) {
		return nil
	}
	r := b.defRange()
	return &r
}

func (b *consulBlock) defRange() hcl.Range { return b.DefRange }
func (b *xdsBlock) defRange() hcl.Range    { return b.DefRange }
func (b *adminBlock) defRange() hcl.Range  { return b.DefRange }
func (b *logBlock) defRange() hcl.Range    { return b.DefRange }

// Config is the merged configuration of every document.
type Config struct {
	Settings Settings
	Policy   *Policy
	// Sources names the documents merged, in order.
	Sources []string
}

// Merge combines documents into one Config. Each settings block may appear
// in only one document; a second one is an error naming both places.
func Merge(docs ...*Document) (*Config, hcl.Diagnostics) {
	cfg := &Config{Settings: DefaultSettings()}
	var diags hcl.Diagnostics
	var seen = map[string]hcl.Range{}
	once := func(block string, present bool, rng hcl.Range) bool {
		if !present {
			return false
		}
		if prev, ok := seen[block]; ok {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  fmt.Sprintf("Duplicate %s block", block),
				Detail:   fmt.Sprintf("Only one %s block is allowed across all configuration; previous definition at %s.", block, pos(prev)),
				Subject:  rng.Ptr(),
			})
			return false
		}
		seen[block] = rng
		return true
	}
	for _, d := range docs {
		cfg.Sources = append(cfg.Sources, d.Name)
		if d.consul != nil && once("consul", true, d.consul.DefRange) {
			diags = append(diags, d.consul.apply(&cfg.Settings.Consul)...)
		}
		if d.xds != nil && once("xds", true, d.xds.DefRange) {
			diags = append(diags, d.xds.apply(&cfg.Settings.XDS)...)
		}
		if d.admin != nil && once("admin", true, d.admin.DefRange) {
			diags = append(diags, d.admin.apply(&cfg.Settings.Admin)...)
		}
		if d.log != nil && once("log", true, d.log.DefRange) {
			diags = append(diags, d.log.apply(&cfg.Settings.Log)...)
		}
	}
	pol, ds := resolvePolicy(docs)
	cfg.Policy = pol
	diags = append(diags, ds...)
	return cfg, diags
}

// LoadFiles reads, parses and merges configuration files, then reads the
// PEM files the policy names (Policy.ReadFiles). The returned map holds
// each file's source for printing diagnostics with context.
func LoadFiles(paths ...string) (*Config, map[string][]byte, hcl.Diagnostics) {
	return LoadWith(paths, nil)
}

// LoadWith is LoadFiles with more documents (KV documents, already
// parsed) merged after the files, as the daemon merges them.
func LoadWith(paths []string, extra []*Document) (*Config, map[string][]byte, hcl.Diagnostics) {
	var (
		diags   hcl.Diagnostics
		docs    []*Document
		sources = map[string][]byte{}
	)
	if len(paths) == 0 {
		return nil, sources, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "No configuration files",
			Detail:   "Pass at least one file with -config FILE.",
		}}
	}
	for _, p := range paths {
		src, err := ReadBoundedFile(context.Background(), p, MaxDocumentBytes)
		if err != nil {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Cannot read configuration file",
				Detail:   err.Error(),
				Subject:  &hcl.Range{Filename: p},
			})
			continue
		}
		sources[p] = src
		d, ds := Parse(p, src)
		diags = append(diags, ds...)
		if d != nil {
			docs = append(docs, d)
		}
	}
	if diags.HasErrors() {
		return nil, sources, diags
	}
	cfg, ds := Merge(append(docs, extra...)...)
	diags = append(diags, ds...)
	if diags.HasErrors() {
		return nil, sources, diags
	}
	// The certificates and keys tls blocks name are read and checked
	// now, so validate reports a missing or broken file like any other
	// problem; Parse and Merge never touch them.
	diags = append(diags, cfg.Policy.ReadFiles(time.Now())...)
	if diags.HasErrors() {
		return nil, sources, diags
	}
	return cfg, sources, diags
}

// FormatDiagnostics renders each diagnostic as one
// "file:line:col: summary: detail" line (warnings marked), the form editors
// and CI annotations understand.
func FormatDiagnostics(diags hcl.Diagnostics) []string {
	out := make([]string, 0, len(diags))
	for _, d := range diags {
		pos := ""
		switch {
		case d.Subject == nil:
		case d.Subject.Start.Line == 0:
			// A problem with the whole file or KV key, e.g. unreadable.
			pos = d.Subject.Filename + ": "
		default:
			pos = fmt.Sprintf("%s:%d:%d: ", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column)
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + d.Detail
		}
		if d.Severity == hcl.DiagWarning {
			msg = "warning: " + msg
		}
		// A secret pasted into the wrong field (a private key as a path)
		// is echoed by the diagnostic about it; these lines go to the log
		// and the admin pages.
		out = append(out, RedactSecrets(pos+msg))
	}
	return out
}

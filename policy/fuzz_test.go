package policy

import (
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

// FuzzParse feeds arbitrary bytes to the parser and the merger the way
// `validate` and a KV reload do. Whatever the input, nothing panics, every
// error can be printed as file:line:col, the result is deterministic, and a
// policy that passes validation keeps the invariants model.Build relies on.
// The seed corpus in testdata/fuzz/FuzzParse covers every block type.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, src []byte) {
		// A configuration file.
		doc, diags := Parse("fuzz.hcl", src)
		checkDiags(t, "Parse", "fuzz.hcl", doc != nil, diags)
		if doc != nil {
			cfg, mdiags := Merge(doc)
			checkDiags(t, "Merge", "fuzz.hcl", true, mdiags)
			if !mdiags.HasErrors() {
				checkPolicy(t, cfg.Policy)
			}
			_, adiags := Merge(doc)
			if !slices.Equal(FormatDiagnostics(mdiags), FormatDiagnostics(adiags)) {
				t.Fatalf("Merge is not deterministic:\n%s\n---\n%s", strings.Join(FormatDiagnostics(mdiags), "\n"), strings.Join(FormatDiagnostics(adiags), "\n"))
			}
			// The same document twice: every service and proxy is a
			// duplicate, every settings block too.
			_, ddiags := Merge(doc, doc)
			checkDiags(t, "Merge twice", "fuzz.hcl", true, ddiags)
		}

		// The same bytes as a KV document.
		kdoc, kdiags := ParseKV("xds-bridge/policy/fuzz", src)
		checkDiags(t, "ParseKV", "xds-bridge/policy/fuzz", kdoc != nil, kdiags)
		if kdoc != nil {
			if kdoc.consul != nil || kdoc.xds != nil || kdoc.admin != nil || kdoc.log != nil {
				t.Fatal("ParseKV accepted daemon settings")
			}
			_, mdiags := Merge(kdoc)
			checkDiags(t, "Merge KV", "xds-bridge/policy/fuzz", true, mdiags)
		}
	})
}

// checkDiags asserts that an error result has diagnostics and that every
// error diagnostic points into the named document.
func checkDiags(t *testing.T, step, name string, ok bool, diags hcl.Diagnostics) {
	t.Helper()
	if !ok && !diags.HasErrors() {
		t.Fatalf("%s: no result and no error", step)
	}
	for _, d := range diags {
		if d == nil {
			t.Fatalf("%s: nil diagnostic", step)
		}
		if d.Severity != hcl.DiagError {
			continue
		}
		if d.Subject == nil {
			t.Fatalf("%s: error without a Subject: %s: %s", step, d.Summary, d.Detail)
		}
		if d.Subject.Filename != name || d.Subject.Start.Line < 1 || d.Subject.Start.Column < 1 {
			t.Fatalf("%s: error at unusable position %q %d:%d: %s: %s", step, d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, d.Summary, d.Detail)
		}
		if d.Summary == "" {
			t.Fatalf("%s: error without a summary at %s", step, pos(*d.Subject))
		}
	}
	_ = FormatDiagnostics(diags)
}

// checkPolicy asserts what a validated policy guarantees.
func checkPolicy(t *testing.T, p *Policy) {
	t.Helper()
	if p == nil {
		t.Fatal("valid configuration without a policy")
	}
	if !slices.IsSortedFunc(p.Services, func(a, b *Service) int { return strings.Compare(a.Name, b.Name) }) {
		t.Fatal("services not sorted")
	}
	checkTarget := func(where string, tg Target) {
		if tg.Weight < 1 {
			t.Fatalf("%s: target %+v has weight %d", where, tg, tg.Weight)
		}
		if tg.Subset != "" {
			s := p.Service(tg.Service)
			if s == nil || s.SubsetNamed(tg.Subset) == nil {
				t.Fatalf("%s: target %+v names an undeclared subset", where, tg)
			}
		}
	}
	for _, s := range p.Services {
		if s.ConnectTimeout <= 0 || strings.Contains(s.Name, ".") {
			t.Fatalf("service %+v", s)
		}
	}
	for _, pr := range p.Proxies {
		if (len(pr.Listeners) == 0) != pr.Proxyless {
			t.Fatalf("proxy %q: %d listeners, proxyless %v", pr.Name, len(pr.Listeners), pr.Proxyless)
		}
		for _, l := range pr.Listeners {
			if l.Port < 1 || l.Port > 65535 {
				t.Fatalf("listener %q port %d", l.Name, l.Port)
			}
			switch l.Protocol {
			case "tcp":
				if len(l.TCP) == 0 || len(l.VirtualHosts) > 0 {
					t.Fatalf("tcp listener %q: %d targets, %d virtual hosts", l.Name, len(l.TCP), len(l.VirtualHosts))
				}
				for _, tg := range l.TCP {
					checkTarget(l.Source, tg)
				}
			case "http":
				if len(l.VirtualHosts) == 0 || len(l.TCP) > 0 {
					t.Fatalf("http listener %q: %d targets, %d virtual hosts", l.Name, len(l.TCP), len(l.VirtualHosts))
				}
				for _, vh := range l.VirtualHosts {
					if len(vh.Routes) == 0 || len(vh.Domains) == 0 {
						t.Fatalf("virtual_host %q: %d routes, %d domains", vh.Name, len(vh.Routes), len(vh.Domains))
					}
					for _, rt := range vh.Routes {
						actions := 0
						if len(rt.Targets) > 0 {
							actions++
						}
						if rt.Redirect != nil {
							actions++
						}
						if rt.DirectResponse != nil {
							actions++
						}
						if actions != 1 {
							t.Fatalf("route at %s has %d actions", rt.Source, actions)
						}
						for _, tg := range rt.Targets {
							checkTarget(rt.Source, tg)
						}
						if rt.Mirror != nil {
							checkTarget(rt.Source, rt.Mirror.Target)
						}
					}
				}
			default:
				t.Fatalf("listener %q protocol %q", l.Name, l.Protocol)
			}
		}
	}
	if !slices.IsSortedFunc(p.GRPCServices, func(a, b *GRPCService) int { return strings.Compare(a.Name, b.Name) }) {
		t.Fatal("grpc services not sorted")
	}
	for _, g := range p.GRPCServices {
		if len(g.Routes) == 0 {
			t.Fatalf("grpc_service %q without routes", g.Name)
		}
		for _, rt := range g.Routes {
			// Only what gRPC's xDS client supports: forward to targets.
			if len(rt.Targets) == 0 || rt.Redirect != nil || rt.DirectResponse != nil || rt.Rewrite != nil || rt.Mirror != nil ||
				rt.IdleTimeout != 0 || len(rt.Match.Query) > 0 || rt.Match.Method != "" ||
				len(rt.RequestHeaders.Add)+len(rt.RequestHeaders.Set)+len(rt.RequestHeaders.Remove)+
					len(rt.ResponseHeaders.Add)+len(rt.ResponseHeaders.Set)+len(rt.ResponseHeaders.Remove) > 0 ||
				(rt.Retry != nil && rt.Retry.PerTryTimeout != 0) {
				t.Fatalf("grpc_service %q route at %s has something gRPC does not support: %+v", g.Name, rt.Source, rt)
			}
			for _, tg := range rt.Targets {
				checkTarget(rt.Source, tg)
			}
		}
	}
}

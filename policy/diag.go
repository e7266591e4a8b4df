package policy

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// diags collects problems while resolving; every problem points at source.
type diags struct{ list hcl.Diagnostics }

func (d *diags) add(rng hcl.Range, summary, detail string, args ...any) {
	if len(args) > 0 {
		detail = fmt.Sprintf(detail, args...)
	}
	r := rng
	d.list = append(d.list, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: &r})
}

func (d *diags) warn(rng hcl.Range, summary, detail string, args ...any) {
	if len(args) > 0 {
		detail = fmt.Sprintf(detail, args...)
	}
	r := rng
	d.list = append(d.list, &hcl.Diagnostic{Severity: hcl.DiagWarning, Summary: summary, Detail: detail, Subject: &r})
}

func (d *diags) extend(ds hcl.Diagnostics) { d.list = append(d.list, ds...) }

// valueRange is where attribute name's value is written in body, so a
// diagnostic points at the bad value rather than the whole block. It falls
// back to the block's range when the body is not native syntax or lacks
// the attribute.
func valueRange(body hcl.Body, name string, fallback hcl.Range) hcl.Range {
	if sb, ok := body.(*hclsyntax.Body); ok {
		if a, ok := sb.Attributes[name]; ok {
			return a.Expr.Range()
		}
	}
	return fallback
}

// pos renders a range start as file:line:col, the form used in details
// ("previous definition at ...").
func pos(r hcl.Range) string {
	return fmt.Sprintf("%s:%d:%d", r.Filename, r.Start.Line, r.Start.Column)
}

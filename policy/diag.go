package policy

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
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

// elemRange is where element i of list attribute name is written, so a
// diagnostic about one list entry points at that entry. It falls back to the
// whole value when the list is not a literal, and to fallback when the
// attribute is absent.
func elemRange(body hcl.Body, name string, i int, fallback hcl.Range) hcl.Range {
	if sb, ok := body.(*hclsyntax.Body); ok {
		if a, ok := sb.Attributes[name]; ok {
			if t, ok := a.Expr.(*hclsyntax.TupleConsExpr); ok && i >= 0 && i < len(t.Exprs) {
				return t.Exprs[i].Range()
			}
			return a.Expr.Range()
		}
	}
	return fallback
}

// keyRange is where key is written in the object (map) attribute name,
// falling back like elemRange.
func keyRange(body hcl.Body, name, key string, fallback hcl.Range) hcl.Range {
	if sb, ok := body.(*hclsyntax.Body); ok {
		if a, ok := sb.Attributes[name]; ok {
			if o, ok := a.Expr.(*hclsyntax.ObjectConsExpr); ok {
				for _, item := range o.Items {
					k, diags := item.KeyExpr.Value(nil)
					if !diags.HasErrors() && k.IsKnown() && !k.IsNull() && k.Type() == cty.String && k.AsString() == key {
						return item.KeyExpr.Range()
					}
				}
			}
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

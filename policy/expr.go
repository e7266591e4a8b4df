package policy

import (
	"fmt"
	"time"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// durationAttr converts an optional attribute written in Go duration syntax
// ("1.5s", "300ms") into dst, leaving dst alone when the attribute is absent.
func durationAttr(expr hcl.Expression, dst *time.Duration) hcl.Diagnostics {
	return parseDuration(expr, dst, false)
}

// durationAttrZero is durationAttr for timeouts, where "0s" means "none":
// it stores ir.NoTimeout so "no timeout" stays distinct from "unset" (zero,
// Envoy's default).
func durationAttrZero(expr hcl.Expression, dst *time.Duration) hcl.Diagnostics {
	diags := parseDuration(expr, dst, true)
	if !diags.HasErrors() && expr != nil && *dst == 0 {
		if v, d := expr.Value(nil); !d.HasErrors() && !v.IsNull() {
			*dst = ir.NoTimeout
		}
	}
	return diags
}

func parseDuration(expr hcl.Expression, dst *time.Duration, allowZero bool) hcl.Diagnostics {
	if expr == nil {
		return nil
	}
	v, diags := expr.Value(nil)
	if diags.HasErrors() || v.IsNull() {
		return diags
	}
	bad := func(detail string) hcl.Diagnostics {
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Invalid duration",
			Detail:   detail,
			Subject:  expr.Range().Ptr(),
		}}
	}
	sv, err := convert.Convert(v, cty.String)
	if err != nil || !sv.IsKnown() {
		return bad(`A duration must be a string in Go syntax, e.g. "1s" or "250ms".`)
	}
	d, err := time.ParseDuration(sv.AsString())
	if err != nil {
		return bad(fmt.Sprintf(`%q is not a duration: use Go syntax, e.g. "1s" or "250ms".`, sv.AsString()))
	}
	if d < 0 || (d == 0 && !allowZero) {
		return bad(fmt.Sprintf("%q must be positive.", sv.AsString()))
	}
	*dst = d
	return nil
}

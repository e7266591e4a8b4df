package routetest

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/policy/intention"
)

// Intention expectations: whether a Connect sidecar's intentions let the
// request in when it comes from the service named by request.source. The
// decision is the intentions' own (intention.Explain, Consul's documented
// evaluation), which the RBAC the bridge serves is tested to agree with.

func decodeIntentionExpect(t *Test, e *expectSchema, errorAt func(name, summary, detail string)) hcl.Diagnostics {
	if e.Intention == nil {
		return nil
	}
	a := ir.IntentionAction(*e.Intention)
	if a != ir.IntentionAllow && a != ir.IntentionDeny {
		errorAt("intention", "Invalid intention", fmt.Sprintf("Expect \"allow\" or \"deny\", not %q.", *e.Intention))
	}
	if t.Source == "" {
		errorAt("intention", "Intention without source", "Name the calling service in the request: request { source = \"web\" ... }.")
	}
	t.Expect.Intention = &a
	return nil
}

// intentionOnly reports whether the test asserts nothing but the
// intention: it then needs no HTTP listener of the sidecar's own.
func (t *Test) intentionOnly() bool {
	x := t.Expect
	x.Intention = nil
	return t.Expect.Intention != nil && isZeroExpect(&x)
}

// sidecar finds the sidecar group the test's proxy names: a sidecar
// group by its name ("sidecar:NODE/PROXY-ID"), else the model group of
// the policy group proxy resolves to (one declared sidecar_for).
func (e *env) sidecar(t *Test) (*ir.Group, *Failure) {
	fail := &Failure{Subject: t.ranges["proxy"]}
	name := t.Proxy
	if p := e.pol.ProxyFor(t.Proxy); p != nil {
		name = p.Name
	}
	for i := range e.model.Groups {
		if g := &e.model.Groups[i]; g.Name == name || g.Name == t.Proxy {
			if g.Sidecar != nil {
				return g, nil
			}
			fail.Message = fmt.Sprintf("proxy: group %q is no Connect sidecar; intentions are tested against a registered connect-proxy's group or a proxy group with sidecar_for", g.Name)
			return nil, fail
		}
	}
	fail.Message = fmt.Sprintf("proxy: no sidecar group matches %q", t.Proxy)
	return nil, fail
}

// checkIntention evaluates the intention expectation; it returns what
// the request got.
func (e *env) checkIntention(t *Test, res *Result) string {
	g, fail := e.sidecar(t)
	if fail != nil {
		res.Failures = append(res.Failures, *fail)
		return "not evaluated"
	}
	in := g.Sidecar.Intentions
	d := intention.Explain(in, intention.Request{Source: t.Source, Method: t.Request.Method, Path: pathOnly(t.Request.Path), Headers: t.Request.Headers})
	got := fmt.Sprintf("from %q to %q: %s", t.Source, g.Sidecar.Service, d.Describe(in))
	if d.Action != *t.Expect.Intention {
		res.Failures = append(res.Failures, Failure{Subject: t.ranges["intention"], Message: fmt.Sprintf("intention: expected %s, got %s", *t.Expect.Intention, got)})
	}
	return got
}

func isZeroExpect(x *Expect) bool { return reflect.ValueOf(*x).IsZero() }

// pathOnly is the path without its query string: what Envoy's RBAC
// url_path (and so a permission's path) matches.
func pathOnly(p string) string {
	p, _, _ = strings.Cut(p, "?")
	return p
}

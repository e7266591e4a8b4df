package intention

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Request is what an intention decision looks at: the calling service
// and, for an HTTP destination, the request.
type Request struct {
	// Source is the calling service's name (its certificate's SPIFFE id
	// names it).
	Source string
	// Method and Path (without the query string) of an HTTP request.
	Method, Path string
	// Headers by lower-case name.
	Headers map[string]string
}

// Decide is what in does with req, evaluated the way Consul documents
// it: the first rule (in precedence order) whose source matches decides;
// for an L7 rule, the first permission whose request match applies, or
// the default if none does; with no rule matching, the default. It is
// the reference the bridge's RBAC translation is tested against, and
// what route tests use to say whether a caller gets in.
func Decide(in ir.Intentions, req Request) ir.IntentionAction { return Explain(in, req).Action }

// Decision is what Decide decided, and why.
type Decision struct {
	Action ir.IntentionAction
	// Rule is the index of the deciding rule in Intentions.Rules, -1
	// when none matched (the default decided).
	Rule int
	// Permission is the index of the deciding permission of an L7 rule,
	// -1 when the rule is L4 or none of its permissions matched.
	Permission int
}

// Explain is Decide with the rule and permission that decided.
func Explain(in ir.Intentions, req Request) Decision {
	for i := range in.Rules {
		r := &in.Rules[i]
		if r.Source != Wildcard && r.Source != req.Source {
			continue
		}
		if len(r.Permissions) == 0 {
			return Decision{Action: r.Action, Rule: i, Permission: -1}
		}
		for j := range r.Permissions {
			if permissionMatches(&r.Permissions[j], &req) {
				return Decision{Action: r.Permissions[j].Action, Rule: i, Permission: j}
			}
		}
		return Decision{Action: in.Default, Rule: i, Permission: -1}
	}
	return Decision{Action: in.Default, Rule: -1, Permission: -1}
}

// Describe says in words what decided d, for reports: "allow by the
// intention of source \"web\" (precedence 9), permission 2".
func (d Decision) Describe(in ir.Intentions) string {
	if d.Rule < 0 || d.Rule >= len(in.Rules) {
		return fmt.Sprintf("%s by default (no intention matches the source)", d.Action)
	}
	r := in.Rules[d.Rule]
	s := fmt.Sprintf("%s by the intention of source %q (precedence %d)", d.Action, r.Source, r.Precedence)
	switch {
	case len(r.Permissions) == 0:
	case d.Permission >= 0:
		s += fmt.Sprintf(", permission %d", d.Permission)
	default:
		s += ", no permission matches: the default"
	}
	return s
}

func permissionMatches(p *ir.IntentionPermission, req *Request) bool {
	switch {
	case p.PathExact != "" && req.Path != p.PathExact:
		return false
	case p.PathPrefix != "" && !strings.HasPrefix(req.Path, p.PathPrefix):
		return false
	case p.PathRegex != "" && !fullMatch(p.PathRegex, req.Path):
		return false
	}
	if len(p.Methods) > 0 {
		found := false
		for _, m := range p.Methods {
			found = found || m == req.Method
		}
		if !found {
			return false
		}
	}
	for i := range p.Headers {
		if !headerMatches(&p.Headers[i], req.Headers) {
			return false
		}
	}
	return true
}

// headerMatches matches as Envoy's header matchers do: a missing header
// matches only an inverted presence match ("absent"); an inverted value
// match needs the header (Envoy's treat_missing_header_as_empty off).
func headerMatches(h *ir.IntentionHeader, headers map[string]string) bool {
	v, ok := headers[strings.ToLower(h.Name)]
	if !ok {
		return h.Invert && h.Present
	}
	m := true
	{
		fold := func(s string) string {
			if h.IgnoreCase {
				return strings.ToLower(s)
			}
			return s
		}
		switch {
		case h.Exact != "":
			m = fold(v) == fold(h.Exact)
		case h.Prefix != "":
			m = strings.HasPrefix(fold(v), fold(h.Prefix))
		case h.Suffix != "":
			m = strings.HasSuffix(fold(v), fold(h.Suffix))
		case h.Contains != "":
			m = strings.Contains(fold(v), fold(h.Contains))
		case h.Regex != "":
			m = fullMatch(h.Regex, v)
		}
	}
	return m != h.Invert
}

// fullMatch matches the whole value, as Envoy's safe_regex does. A
// pattern that does not compile (Resolve rejects those) matches nothing.
func fullMatch(pattern, v string) bool {
	re, err := regexp.Compile(`^(?:` + pattern + `)$`)
	return err == nil && re.MatchString(v)
}

// Package intention resolves Consul's service-intentions config entries
// into the intentions of one destination service (ir.Intentions), with
// Consul's precedence. It is pure: entries come in as values (FromConfigEntry
// converts what Consul's API returns), resolved rules go out.
//
// The bridge's RBAC names callers by SPIFFE ids of the default namespace
// and partition, and its listeners trust the local Connect CA only. So:
// sources of a cluster peer (another CA: they cannot connect at all) are
// dropped; an allow of a source in another namespace, partition or
// sameness group is dropped too (it can only keep out a caller Consul
// would let in, never the reverse); a deny of one is an error, since
// dropping it would let in a caller Consul keeps out. What else would
// change who gets in but cannot be enforced (JWT requirements,
// non-Consul source types) is an error as well, never silently dropped:
// an allow that required a JWT would otherwise allow without one.
package intention

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

// Wildcard is the source or destination name meaning every service.
const Wildcard = "*"

// Entry is one service-intentions config entry: who may call Destination.
type Entry struct {
	// Destination is a service name, or Wildcard for an entry that
	// applies to every destination (below the destination's own).
	Destination string
	Sources     []Source
	// Unsupported lists what the entry asks for that the bridge cannot
	// enforce; Resolve fails on a destination it applies to.
	Unsupported []string `json:",omitempty"`
}

// Source is one source of an entry: an L4 Action, or L7 Permissions.
type Source struct {
	// Name is a service name or Wildcard.
	Name string
	// Namespace is "" or "default" for the default namespace, Wildcard
	// for every namespace (only an allow of it can be enforced: it
	// covers the default namespace, below that namespace's own "*").
	Namespace string `json:",omitempty"`
	// Partition ("" or "default"), Peer and SamenessGroup say where else
	// the source may be; see the package comment.
	Partition     string `json:",omitempty"`
	Peer          string `json:",omitempty"`
	SamenessGroup string `json:",omitempty"`
	Action        ir.IntentionAction
	Permissions   []Permission `json:",omitempty"`
	Unsupported   []string     `json:",omitempty"`
}

// Permission is one L7 permission: Action for requests HTTP matches
// (every request when HTTP is nil).
type Permission struct {
	Action ir.IntentionAction
	HTTP   *HTTP `json:",omitempty"`
}

// HTTP is the request match of a permission, as Consul's
// IntentionHTTPPermission: at most one path match, methods, headers.
type HTTP struct {
	PathExact, PathPrefix, PathRegex string
	Methods                          []string
	Header                           []Header
}

// Header is one header match, as Consul's IntentionHTTPHeaderPermission.
type Header struct {
	Name                                   string
	Present                                bool
	Exact, Prefix, Suffix, Contains, Regex string
	IgnoreCase                             bool
	Invert                                 bool
}

// FromConfigEntry converts what Consul's API returns for a
// service-intentions config entry. It keeps everything that decides who
// gets in; Resolve judges it.
func FromConfigEntry(e *api.ServiceIntentionsConfigEntry) Entry {
	if e == nil {
		return Entry{}
	}
	out := Entry{Destination: e.Name}
	if !defaultTenancy(e.Partition) || !defaultTenancy(e.Namespace) {
		// An entry for a destination outside the default namespace and
		// partition is no destination the bridge serves; as a foreign
		// destination it matches no sidecar's name lookup.
		out.Destination = ""
		out.Unsupported = append(out.Unsupported, fmt.Sprintf("destination in partition %q namespace %q", e.Partition, e.Namespace))
	}
	if e.JWT != nil && len(e.JWT.Providers) > 0 {
		out.Unsupported = append(out.Unsupported, "JWT requirement on the entry")
	}
	for _, s := range e.Sources {
		if s == nil {
			continue
		}
		src := Source{
			Name:          s.Name,
			Namespace:     s.Namespace,
			Partition:     s.Partition,
			Peer:          s.Peer,
			SamenessGroup: s.SamenessGroup,
			Action:        ir.IntentionAction(strings.ToLower(string(s.Action))),
		}
		if s.Type != "" && s.Type != api.IntentionSourceConsul {
			src.Unsupported = append(src.Unsupported, fmt.Sprintf("source type %q", s.Type))
		}
		for _, p := range s.Permissions {
			if p == nil {
				continue
			}
			perm := Permission{Action: ir.IntentionAction(strings.ToLower(string(p.Action)))}
			if p.JWT != nil && len(p.JWT.Providers) > 0 {
				src.Unsupported = append(src.Unsupported, "JWT requirement on a permission")
			}
			if h := p.HTTP; h != nil {
				perm.HTTP = &HTTP{PathExact: h.PathExact, PathPrefix: h.PathPrefix, PathRegex: h.PathRegex, Methods: slices.Clone(h.Methods)}
				for _, hd := range h.Header {
					perm.HTTP.Header = append(perm.HTTP.Header, Header{
						Name: hd.Name, Present: hd.Present, Exact: hd.Exact, Prefix: hd.Prefix, Suffix: hd.Suffix,
						Contains: hd.Contains, Regex: hd.Regex, IgnoreCase: hd.IgnoreCase, Invert: hd.Invert,
					})
				}
			}
			src.Permissions = append(src.Permissions, perm)
		}
		out.Sources = append(out.Sources, src)
	}
	return out
}

func defaultTenancy(s string) bool { return s == "" || s == "default" }

// ErrInvalid marks an entry the bridge cannot turn into intentions.
var ErrInvalid = errors.New("invalid intention")

// Precedence is Consul's precedence of an intention (higher wins): from
// 9 (exact source, exact destination) down; each wildcard, in the
// destination first, lowers it (Consul's Intention.UpdatePrecedence,
// with the destination namespace always exact).
func Precedence(sourceNamespace, source, destination string) int {
	max := 9
	if destination == Wildcard {
		max = 6
	}
	exact := 2
	switch {
	case sourceNamespace == Wildcard:
		exact = 0
	case source == Wildcard:
		exact = 1
	}
	return max - (2 - exact)
}

// Resolve returns the intentions of destination: every source of the
// entries for destination and for Wildcard, highest precedence first (a
// source's rule from the destination's own entry shadows the same
// source's rule from the wildcard entry), with def for callers no rule
// matches. Errors name the entry and source and say what to fix; the
// caller keeps serving what it had rather than enforce less than asked.
func Resolve(entries []Entry, destination string, def ir.IntentionAction) (ir.Intentions, error) {
	out := ir.Intentions{Default: def}
	var errs []error
	if def != ir.IntentionAllow && def != ir.IntentionDeny {
		errs = append(errs, fmt.Errorf("default intention %q: must be %q or %q: %w", def, ir.IntentionAllow, ir.IntentionDeny, ErrInvalid))
	}
	if destination == "" || destination == Wildcard {
		errs = append(errs, fmt.Errorf("intentions of destination %q: a destination is one service name: %w", destination, ErrInvalid))
	}
	type candidate struct {
		rule      ir.IntentionRule
		namespace string
	}
	var cands []candidate
	seenEntry := map[string]bool{}
	for _, e := range entries {
		if e.Destination != destination && e.Destination != Wildcard {
			continue
		}
		where := fmt.Sprintf("service-intentions %q", e.Destination)
		if seenEntry[e.Destination] {
			// Consul keeps one entry per destination; two here would make
			// the order between their sources arbitrary.
			errs = append(errs, fmt.Errorf("%s: two entries for one destination: %w", where, ErrInvalid))
			continue
		}
		seenEntry[e.Destination] = true
		for _, u := range e.Unsupported {
			errs = append(errs, fmt.Errorf("%s: %s is not supported by the bridge; remove it: %w", where, u, ErrInvalid))
		}
		seenSource := map[[2]string]bool{}
		for i, s := range e.Sources {
			at := fmt.Sprintf("%s source %d (%q)", where, i, s.Name)
			if s.Peer != "" {
				continue // another CA's callers: see the package comment
			}
			ns := s.Namespace
			if ns == "default" {
				ns = ""
			}
			rule, err := toRule(at, &s)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			allowOnly := rule.Action == ir.IntentionAllow
			switch elsewhere := !defaultTenancy(s.Partition) || s.SamenessGroup != "" || (ns != "" && ns != Wildcard); {
			case elsewhere && allowOnly:
				continue
			case elsewhere:
				errs = append(errs, fmt.Errorf("%s: a deny or L7 rule for callers in partition %q, namespace %q, sameness group %q cannot be enforced (the bridge matches callers of the default namespace and partition); remove it or make it an allow: %w", at, s.Partition, s.Namespace, s.SamenessGroup, ErrInvalid))
				continue
			case ns == Wildcard && rule.Source != Wildcard:
				errs = append(errs, fmt.Errorf("%s: an exact name cannot follow the wildcard namespace: %w", at, ErrInvalid))
				continue
			case ns == Wildcard && !allowOnly:
				errs = append(errs, fmt.Errorf("%s: a deny or L7 rule for every namespace cannot be enforced (the bridge matches callers of the default namespace); use namespace \"default\": %w", at, ErrInvalid))
				continue
			}
			key := [2]string{ns, rule.Source}
			if seenSource[key] {
				errs = append(errs, fmt.Errorf("%s: the source appears twice in the entry: %w", at, ErrInvalid))
				continue
			}
			seenSource[key] = true
			rule.Precedence = Precedence(ns, rule.Source, e.Destination)
			cands = append(cands, candidate{rule: rule, namespace: ns})
		}
	}
	if len(errs) > 0 {
		return ir.Intentions{}, errors.Join(errs...)
	}
	// Highest precedence first; ties (the same kind of source from the
	// same entry) by name, which cannot matter: their callers differ.
	slices.SortStableFunc(cands, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(b.rule.Precedence, a.rule.Precedence), strings.Compare(a.rule.Source, b.rule.Source))
	})
	// A source already decided by a higher-precedence rule (the same
	// name from the destination's own entry, or "*" from any namespace
	// below "*" of the default one) is never reached: drop it, so the
	// rules say what is enforced.
	seen := map[string]bool{}
	for _, c := range cands {
		if seen[c.rule.Source] {
			continue
		}
		seen[c.rule.Source] = true
		out.Rules = append(out.Rules, c.rule)
	}
	return out, nil
}

// toRule checks one source and converts it to a rule.
func toRule(at string, s *Source) (ir.IntentionRule, error) {
	var errs []error
	for _, u := range s.Unsupported {
		errs = append(errs, fmt.Errorf("%s: %s is not supported by the bridge; remove it: %w", at, u, ErrInvalid))
	}
	switch {
	case s.Name == "":
		errs = append(errs, fmt.Errorf("%s: the source has no name: %w", at, ErrInvalid))
	case s.Name != Wildcard && strings.Contains(s.Name, Wildcard):
		errs = append(errs, fmt.Errorf("%s: '*' cannot be part of a name, only the whole name: %w", at, ErrInvalid))
	}
	rule := ir.IntentionRule{Source: s.Name}
	switch {
	case s.Action != "" && len(s.Permissions) > 0:
		errs = append(errs, fmt.Errorf("%s: has both an action and permissions; keep one: %w", at, ErrInvalid))
	case len(s.Permissions) == 0:
		if err := checkAction(at, s.Action); err != nil {
			errs = append(errs, err)
		}
		rule.Action = s.Action
	default:
		for j, p := range s.Permissions {
			pat := fmt.Sprintf("%s permission %d", at, j)
			perm, err := toPermission(pat, &p)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			rule.Permissions = append(rule.Permissions, perm)
		}
	}
	return rule, errors.Join(errs...)
}

// checkRegex rejects what RE2 (Envoy's safe_regex engine, whose syntax
// Go's regexp shares) would reject, including programs over Envoy's size
// limit, so a bad pattern fails here with its source named rather than as
// a NACK of the whole listener.
func checkRegex(re string) error {
	if re == "" {
		return nil
	}
	return ir.CheckRegex(re)
}

func checkAction(at string, a ir.IntentionAction) error {
	if a != ir.IntentionAllow && a != ir.IntentionDeny {
		return fmt.Errorf("%s: action %q: must be %q or %q: %w", at, a, ir.IntentionAllow, ir.IntentionDeny, ErrInvalid)
	}
	return nil
}

func toPermission(at string, p *Permission) (ir.IntentionPermission, error) {
	var errs []error
	if err := checkAction(at, p.Action); err != nil {
		errs = append(errs, err)
	}
	out := ir.IntentionPermission{Action: p.Action}
	if h := p.HTTP; h != nil {
		paths := 0
		for _, v := range []string{h.PathExact, h.PathPrefix, h.PathRegex} {
			if v != "" {
				paths++
			}
		}
		if paths > 1 {
			errs = append(errs, fmt.Errorf("%s: more than one of path_exact, path_prefix, path_regex: %w", at, ErrInvalid))
		}
		for _, v := range []string{h.PathExact, h.PathPrefix} {
			if v != "" && !strings.HasPrefix(v, "/") {
				errs = append(errs, fmt.Errorf("%s: path %q must begin with '/': %w", at, v, ErrInvalid))
			}
		}
		if err := checkRegex(h.PathRegex); err != nil {
			errs = append(errs, fmt.Errorf("%s: path_regex: %w: %w", at, err, ErrInvalid))
		}
		out.PathExact, out.PathPrefix, out.PathRegex = h.PathExact, h.PathPrefix, h.PathRegex
		for _, m := range h.Methods {
			if m == "" || strings.ToUpper(m) != m {
				errs = append(errs, fmt.Errorf("%s: method %q: methods are upper case, like GET: %w", at, m, ErrInvalid))
			}
		}
		out.Methods = slices.Clone(h.Methods)
		for k, hd := range h.Header {
			hat := fmt.Sprintf("%s header %d (%q)", at, k, hd.Name)
			n := 0
			if hd.Present {
				n++
			}
			for _, v := range []string{hd.Exact, hd.Prefix, hd.Suffix, hd.Contains, hd.Regex} {
				if v != "" {
					n++
				}
			}
			switch {
			case hd.Name == "":
				errs = append(errs, fmt.Errorf("%s: the header has no name: %w", hat, ErrInvalid))
			case n != 1:
				errs = append(errs, fmt.Errorf("%s: needs exactly one of present, exact, prefix, suffix, contains, regex: %w", hat, ErrInvalid))
			}
			if err := checkRegex(hd.Regex); err != nil {
				errs = append(errs, fmt.Errorf("%s: regex: %w: %w", hat, err, ErrInvalid))
			}
			out.Headers = append(out.Headers, ir.IntentionHeader{
				Name: hd.Name, Present: hd.Present, Exact: hd.Exact, Prefix: hd.Prefix, Suffix: hd.Suffix,
				Contains: hd.Contains, Regex: hd.Regex, IgnoreCase: hd.IgnoreCase, Invert: hd.Invert,
			})
		}
	}
	return out, errors.Join(errs...)
}

package intention

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/consul/api"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
)

func l4(name string, a ir.IntentionAction) Source { return Source{Name: name, Action: a} }

func TestResolve(t *testing.T) {
	allow, deny := ir.IntentionAllow, ir.IntentionDeny
	cases := map[string]struct {
		entries []Entry
		def     ir.IntentionAction
		want    []ir.IntentionRule
	}{
		"no entries: the default alone": {def: deny},
		"exact source before wildcard source": {
			entries: []Entry{{Destination: "api", Sources: []Source{l4("*", allow), l4("web", deny)}}},
			def:     allow,
			want: []ir.IntentionRule{
				{Source: "web", Action: deny, Precedence: 9},
				{Source: "*", Action: allow, Precedence: 8},
			},
		},
		"exact destination before wildcard destination": {
			entries: []Entry{
				{Destination: "*", Sources: []Source{l4("web", allow)}},
				{Destination: "api", Sources: []Source{l4("*", deny)}},
			},
			def: allow,
			want: []ir.IntentionRule{
				{Source: "*", Action: deny, Precedence: 8},
				{Source: "web", Action: allow, Precedence: 6},
			},
		},
		"all four kinds in Consul's order": {
			entries: []Entry{
				{Destination: "*", Sources: []Source{l4("*", deny), l4("web", allow)}},
				{Destination: "api", Sources: []Source{l4("*", allow), l4("web", deny)}},
			},
			def: deny,
			// (*, *) is shadowed by (*, api) for the same source "*";
			// (web, *) by (web, api).
			want: []ir.IntentionRule{
				{Source: "web", Action: deny, Precedence: 9},
				{Source: "*", Action: allow, Precedence: 8},
			},
		},
		"wildcard entry applies to other destinations": {
			entries: []Entry{
				{Destination: "*", Sources: []Source{l4("ops", allow)}},
				{Destination: "billing", Sources: []Source{l4("web", allow)}},
			},
			def:  deny,
			want: []ir.IntentionRule{{Source: "ops", Action: allow, Precedence: 6}},
		},
		"same kind of source sorted by name": {
			entries: []Entry{{Destination: "api", Sources: []Source{l4("web", allow), l4("admin", deny), l4("batch", allow)}}},
			def:     deny,
			want: []ir.IntentionRule{
				{Source: "admin", Action: deny, Precedence: 9},
				{Source: "batch", Action: allow, Precedence: 9},
				{Source: "web", Action: allow, Precedence: 9},
			},
		},
		"wildcard namespace below the default namespace's wildcard": {
			entries: []Entry{{Destination: "api", Sources: []Source{
				{Name: "*", Namespace: "*", Action: allow},
				{Name: "web", Namespace: "default", Action: deny},
			}}},
			def: deny,
			want: []ir.IntentionRule{
				{Source: "web", Action: deny, Precedence: 9},
				{Source: "*", Action: allow, Precedence: 7},
			},
		},
		"peers, and allows elsewhere, never match": {
			entries: []Entry{{Destination: "api", Sources: []Source{
				{Name: "web", Peer: "east", Action: deny},
				{Name: "web", Namespace: "team-a", Action: allow},
				{Name: "web", Partition: "eu", Action: allow},
				{Name: "web", SamenessGroup: "all", Action: allow},
				l4("batch", allow),
			}}},
			def:  deny,
			want: []ir.IntentionRule{{Source: "batch", Action: allow, Precedence: 9}},
		},
		"L7 permissions kept in order": {
			entries: []Entry{{Destination: "api", Sources: []Source{{Name: "web", Permissions: []Permission{
				{Action: deny, HTTP: &HTTP{PathPrefix: "/admin"}},
				{Action: allow, HTTP: &HTTP{PathExact: "/v1/items", Methods: []string{"GET", "HEAD"}, Header: []Header{{Name: "x-team", Exact: "a", IgnoreCase: true}}}},
			}}}}},
			def: deny,
			want: []ir.IntentionRule{{Source: "web", Precedence: 9, Permissions: []ir.IntentionPermission{
				{Action: deny, PathPrefix: "/admin"},
				{Action: allow, PathExact: "/v1/items", Methods: []string{"GET", "HEAD"}, Headers: []ir.IntentionHeader{{Name: "x-team", Exact: "a", IgnoreCase: true}}},
			}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Resolve(tc.entries, "api", tc.def)
			if err != nil {
				t.Fatal(err)
			}
			want := ir.Intentions{Default: tc.def, Rules: tc.want}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Resolve (-want +got):\n%s", diff)
			}
		})
	}
}

// TestResolveOrderIndependent: the order of entries and of sources in
// them does not change the result (Consul sorts by precedence).
func TestResolveOrderIndependent(t *testing.T) {
	a := []Entry{
		{Destination: "*", Sources: []Source{l4("web", ir.IntentionAllow), l4("*", ir.IntentionDeny)}},
		{Destination: "api", Sources: []Source{l4("*", ir.IntentionAllow), l4("web", ir.IntentionDeny), l4("ops", ir.IntentionAllow)}},
	}
	b := []Entry{
		{Destination: "api", Sources: []Source{l4("ops", ir.IntentionAllow), l4("web", ir.IntentionDeny), l4("*", ir.IntentionAllow)}},
		{Destination: "*", Sources: []Source{l4("*", ir.IntentionDeny), l4("web", ir.IntentionAllow)}},
	}
	ra, err := Resolve(a, "api", ir.IntentionDeny)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := Resolve(b, "api", ir.IntentionDeny)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ra, rb); diff != "" {
		t.Errorf("order changed the result (-a +b):\n%s", diff)
	}
	if ra.Rules[0].Source != "ops" || ra.Rules[1].Source != "web" || ra.Rules[2].Source != "*" {
		t.Errorf("rules %+v: want ops, web (exact, by name) then *", ra.Rules)
	}
}

func TestResolveErrors(t *testing.T) {
	cases := map[string]struct {
		entries []Entry
		def     ir.IntentionAction
		dest    string
		want    string
	}{
		"unknown default":           {def: "maybe", want: `default intention "maybe"`},
		"empty destination":         {dest: "-", want: `destination ""`},
		"unknown action":            {entries: []Entry{{Destination: "api", Sources: []Source{l4("web", "permit")}}}, want: `source 0 ("web"): action "permit"`},
		"no action":                 {entries: []Entry{{Destination: "api", Sources: []Source{l4("web", "")}}}, want: `action ""`},
		"empty source name":         {entries: []Entry{{Destination: "api", Sources: []Source{l4("", ir.IntentionAllow)}}}, want: "the source has no name"},
		"partial wildcard":          {entries: []Entry{{Destination: "api", Sources: []Source{l4("web-*", ir.IntentionAllow)}}}, want: "only the whole name"},
		"action and permissions":    {entries: []Entry{{Destination: "api", Sources: []Source{{Name: "web", Action: ir.IntentionAllow, Permissions: []Permission{{Action: ir.IntentionAllow}}}}}}, want: "both an action and permissions"},
		"duplicate source":          {entries: []Entry{{Destination: "api", Sources: []Source{l4("web", ir.IntentionAllow), l4("web", ir.IntentionDeny)}}}, want: "appears twice"},
		"duplicate entry":           {entries: []Entry{{Destination: "api"}, {Destination: "api"}}, want: "two entries"},
		"deny in another namespace": {entries: []Entry{{Destination: "api", Sources: []Source{{Name: "web", Namespace: "team-a", Action: ir.IntentionDeny}}}}, want: `namespace "team-a"`},
		"deny in another partition": {entries: []Entry{{Destination: "api", Sources: []Source{{Name: "web", Partition: "eu", Action: ir.IntentionDeny}}}}, want: `partition "eu"`},
		"L7 in a sameness group":    {entries: []Entry{{Destination: "api", Sources: []Source{{Name: "web", SamenessGroup: "g", Permissions: []Permission{{Action: ir.IntentionAllow}}}}}}, want: `sameness group "g"`},
		"deny in every namespace":   {entries: []Entry{{Destination: "api", Sources: []Source{{Name: "*", Namespace: "*", Action: ir.IntentionDeny}}}}, want: "every namespace"},
		"exact after wildcard ns":   {entries: []Entry{{Destination: "api", Sources: []Source{{Name: "web", Namespace: "*", Action: ir.IntentionAllow}}}}, want: "cannot follow the wildcard namespace"},
		"unsupported on entry":      {entries: []Entry{{Destination: "*", Unsupported: []string{"JWT requirement on the entry"}}}, want: "JWT requirement on the entry is not supported"},
		"unsupported on source":     {entries: []Entry{{Destination: "api", Sources: []Source{{Name: "web", Action: ir.IntentionAllow, Unsupported: []string{`source type "x"`}}}}}, want: `source type "x" is not supported`},
		"permission action":         {entries: []Entry{{Destination: "api", Sources: []Source{{Name: "web", Permissions: []Permission{{Action: "ALLOW!"}}}}}}, want: "permission 0: action"},
		"two paths":                 {entries: []Entry{{Destination: "api", Sources: []Source{{Name: "web", Permissions: []Permission{{Action: ir.IntentionAllow, HTTP: &HTTP{PathExact: "/a", PathPrefix: "/b"}}}}}}}, want: "more than one of path"},
		"relative path":             {entries: []Entry{{Destination: "api", Sources: []Source{{Name: "web", Permissions: []Permission{{Action: ir.IntentionAllow, HTTP: &HTTP{PathPrefix: "a"}}}}}}}, want: "must begin with '/'"},
		"bad regex":                 {entries: []Entry{{Destination: "api", Sources: []Source{{Name: "web", Permissions: []Permission{{Action: ir.IntentionAllow, HTTP: &HTTP{PathRegex: "(["}}}}}}}, want: "path_regex"},
		"regex over RE2's limit":    {entries: []Entry{{Destination: "api", Sources: []Source{{Name: "web", Permissions: []Permission{{Action: ir.IntentionAllow, HTTP: &HTTP{PathRegex: `\p{L}+`}}}}}}}, want: "over Envoy's limit of 100"},
		"lower-case method":         {entries: []Entry{{Destination: "api", Sources: []Source{{Name: "web", Permissions: []Permission{{Action: ir.IntentionAllow, HTTP: &HTTP{Methods: []string{"get"}}}}}}}}, want: `method "get"`},
		"header without match":      {entries: []Entry{{Destination: "api", Sources: []Source{{Name: "web", Permissions: []Permission{{Action: ir.IntentionAllow, HTTP: &HTTP{Header: []Header{{Name: "x"}}}}}}}}}, want: "exactly one of present"},
		"header without name":       {entries: []Entry{{Destination: "api", Sources: []Source{{Name: "web", Permissions: []Permission{{Action: ir.IntentionAllow, HTTP: &HTTP{Header: []Header{{Present: true}}}}}}}}}, want: "header has no name"},
		"header with two matches":   {entries: []Entry{{Destination: "api", Sources: []Source{{Name: "web", Permissions: []Permission{{Action: ir.IntentionAllow, HTTP: &HTTP{Header: []Header{{Name: "x", Exact: "a", Prefix: "b"}}}}}}}}}, want: "exactly one of present"},
		"bad header regex":          {entries: []Entry{{Destination: "api", Sources: []Source{{Name: "web", Permissions: []Permission{{Action: ir.IntentionAllow, HTTP: &HTTP{Header: []Header{{Name: "x", Regex: "a)"}}}}}}}}}, want: "regex"},
		"other destination ignored": {entries: []Entry{{Destination: "billing", Sources: []Source{l4("", "bogus")}}}, want: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			def := tc.def
			if def == "" {
				def = ir.IntentionDeny
			}
			dest := tc.dest
			switch dest {
			case "":
				dest = "api"
			case "-":
				dest = ""
			}
			got, err := Resolve(tc.entries, dest, def)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; got %+v", got)
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q: want ErrInvalid containing %q", err, tc.want)
			}
			if len(got.Rules) != 0 || got.Default != "" {
				t.Errorf("an error returned intentions %+v: a caller might enforce them", got)
			}
		})
	}
}

func TestPrecedence(t *testing.T) {
	cases := []struct {
		ns, src, dst string
		want         int
	}{
		{"", "web", "api", 9},
		{"", "*", "api", 8},
		{"*", "*", "api", 7},
		{"", "web", "*", 6},
		{"", "*", "*", 5},
		{"*", "*", "*", 4},
	}
	for _, c := range cases {
		if got := Precedence(c.ns, c.src, c.dst); got != c.want {
			t.Errorf("Precedence(%q, %q, %q) = %d, want %d", c.ns, c.src, c.dst, got, c.want)
		}
	}
}

func TestFromConfigEntry(t *testing.T) {
	e := &api.ServiceIntentionsConfigEntry{
		Kind: api.ServiceIntentions,
		Name: "api",
		Sources: []*api.SourceIntention{
			{Name: "web", Action: "Allow", Type: api.IntentionSourceConsul},
			{Name: "db", Peer: "other", Action: api.IntentionActionDeny},
			{Name: "ops", Type: "external-uri", Action: api.IntentionActionAllow},
			nil,
			{Name: "admin", Permissions: []*api.IntentionPermission{
				{Action: api.IntentionActionAllow, HTTP: &api.IntentionHTTPPermission{
					PathPrefix: "/admin", Methods: []string{"POST"},
					Header: []api.IntentionHTTPHeaderPermission{{Name: "x-role", Contains: "root", IgnoreCase: true, Invert: true}},
				}},
				{Action: api.IntentionActionDeny, JWT: &api.IntentionJWTRequirement{Providers: []*api.IntentionJWTProvider{{Name: "okta"}}}},
			}},
		},
	}
	want := Entry{Destination: "api", Sources: []Source{
		{Name: "web", Action: ir.IntentionAllow},
		{Name: "db", Peer: "other", Action: ir.IntentionDeny},
		{Name: "ops", Action: ir.IntentionAllow, Unsupported: []string{`source type "external-uri"`}},
		{Name: "admin", Unsupported: []string{"JWT requirement on a permission"}, Permissions: []Permission{
			{Action: ir.IntentionAllow, HTTP: &HTTP{PathPrefix: "/admin", Methods: []string{"POST"}, Header: []Header{{Name: "x-role", Contains: "root", IgnoreCase: true, Invert: true}}}},
			{Action: ir.IntentionDeny},
		}},
	}}
	got := FromConfigEntry(e)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("FromConfigEntry (-want +got):\n%s", diff)
	}
	if _, err := Resolve([]Entry{got}, "api", ir.IntentionDeny); err == nil || !strings.Contains(err.Error(), "external-uri") || !strings.Contains(err.Error(), "JWT") {
		t.Errorf("Resolve of unsupported sources: %v, want both named", err)
	}
	if got := FromConfigEntry(nil); got.Destination != "" || got.Sources != nil {
		t.Errorf("FromConfigEntry(nil) = %+v", got)
	}
	other := FromConfigEntry(&api.ServiceIntentionsConfigEntry{Name: "api", Namespace: "team-a", Sources: []*api.SourceIntention{{Name: "web", Action: "allow"}}})
	if r, err := Resolve([]Entry{other}, "api", ir.IntentionDeny); err != nil || len(r.Rules) != 0 {
		t.Errorf("an entry of another namespace applies to api: %+v, %v", r, err)
	}
}

func TestDecide(t *testing.T) {
	allow, deny := ir.IntentionAllow, ir.IntentionDeny
	in := ir.Intentions{Default: deny, Rules: []ir.IntentionRule{
		{Source: "ops", Action: deny},
		{Source: "web", Permissions: []ir.IntentionPermission{
			{Action: deny, PathPrefix: "/admin"},
			{Action: allow, PathExact: "/items", Methods: []string{"GET"}},
			{Action: allow, Headers: []ir.IntentionHeader{{Name: "X-Team", Exact: "BLUE", IgnoreCase: true}}},
		}},
		{Source: "batch", Permissions: []ir.IntentionPermission{
			{Action: allow, Headers: []ir.IntentionHeader{{Name: "x-team", Exact: "red", Invert: true}}},
		}},
		{Source: "*", Action: allow},
	}}
	cases := []struct {
		req  Request
		want ir.IntentionAction
	}{
		{Request{Source: "ops"}, deny},
		{Request{Source: "api"}, allow},
		{Request{Source: "web", Method: "GET", Path: "/items"}, allow},
		{Request{Source: "web", Method: "POST", Path: "/items"}, deny}, // no permission matches: the default, not "*"
		{Request{Source: "web", Method: "GET", Path: "/admin/x", Headers: map[string]string{"x-team": "blue"}}, deny}, // first permission wins
		{Request{Source: "web", Method: "PUT", Path: "/x", Headers: map[string]string{"x-team": "Blue"}}, allow},
		// An inverted value match needs the header, as in Envoy: without
		// it no permission matches and the default applies.
		{Request{Source: "batch", Path: "/"}, deny},
		{Request{Source: "batch", Path: "/", Headers: map[string]string{"x-team": "blue"}}, allow},
		{Request{Source: "batch", Path: "/", Headers: map[string]string{"x-team": "red"}}, deny},
	}
	for _, c := range cases {
		if got := Decide(in, c.req); got != c.want {
			t.Errorf("Decide(%+v) = %s, want %s", c.req, got, c.want)
		}
	}
}

// TestResolveMatchesConsulsRule checks generated entries (fixed seed)
// against Consul's rule stated directly: of every source that matches
// the caller, in the destination's entry and the wildcard entry, the one
// of highest precedence decides.
func TestResolveMatchesConsulsRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 2))
	callers := []string{"web", "api", "ops"}
	names := append([]string{"*"}, callers...)
	namespaces := []string{"", "default", "*", "team-a"}
	actions := []ir.IntentionAction{ir.IntentionAllow, ir.IntentionDeny}
	perms := []Permission{
		{Action: ir.IntentionAllow, HTTP: &HTTP{PathPrefix: "/a"}},
		{Action: ir.IntentionDeny, HTTP: &HTTP{Methods: []string{"POST"}}},
	}
	for n := range 500 {
		var entries []Entry
		for _, dest := range []string{"api", "*", "billing"} {
			if rng.IntN(3) == 0 {
				continue
			}
			e := Entry{Destination: dest}
			used := map[[2]string]bool{}
			for range rng.IntN(5) {
				s := Source{Name: names[rng.IntN(len(names))], Namespace: namespaces[rng.IntN(len(namespaces))]}
				if s.Namespace == "*" {
					s.Name = "*"
				}
				ns := s.Namespace
				if ns == "default" {
					ns = ""
				}
				if used[[2]string{ns, s.Name}] {
					continue
				}
				used[[2]string{ns, s.Name}] = true
				switch {
				case ns != "":
					// Only allows can be enforced outside the default
					// namespace (TestResolveErrors has the rest).
					s.Action = ir.IntentionAllow
				case rng.IntN(3) == 0:
					s.Permissions = []Permission{perms[rng.IntN(2)], perms[rng.IntN(2)]}
				default:
					s.Action = actions[rng.IntN(2)]
				}
				e.Sources = append(e.Sources, s)
			}
			entries = append(entries, e)
		}
		def := actions[n%2]
		in, err := Resolve(entries, "api", def)
		if err != nil {
			t.Fatalf("case %d: %v", n, err)
		}
		for _, caller := range callers {
			for _, req := range []Request{{Source: caller, Method: "GET", Path: "/a"}, {Source: caller, Method: "POST", Path: "/b"}} {
				want := def
				best := -1
				for _, e := range entries {
					if e.Destination != "api" && e.Destination != "*" {
						continue
					}
					for _, s := range e.Sources {
						if s.Namespace == "team-a" || (s.Name != "*" && s.Name != caller) {
							continue
						}
						if p := Precedence(s.Namespace, s.Name, e.Destination); p > best {
							best = p
							r, _ := toRule("", &s)
							want = Decide(ir.Intentions{Default: def, Rules: []ir.IntentionRule{r}}, req)
						}
					}
				}
				if got := Decide(in, req); got != want {
					t.Fatalf("case %d: %+v: got %s, Consul's rule says %s\nentries: %+v\nresolved: %+v", n, req, got, want, entries, in)
				}
			}
		}
	}
}

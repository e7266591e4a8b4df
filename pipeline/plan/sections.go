package plan

import (
	"fmt"
	"io"
	"strings"

	"github.com/consul-xds-bridge/consul-xds-bridge/ir"
	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// Section is the plan of one role: what changes for it, and how many
// connected proxies have that role now.
type Section struct {
	Role    Role     `json:"role"`
	Title   string   `json:"title"`
	Group   string   `json:"group,omitempty"`
	Changes []Change `json:"changes"`
	Proxies int      `json:"proxies"`
}

// Sections plans every role: the planned world's dump of the role (out,
// with the serving rule groupOf) against running(role), what the running
// bridge serves it. proxies counts the connected proxies by role. Every
// role is computed whatever a caller prints, so a plan narrowed to one
// node.cluster tells the same about it as the whole plan.
func Sections(out *xds.Output, groupOf func(string) string, roles []Role, running func(Role) (*xds.ConfigDump, error), proxies map[Role]int) ([]Section, error) {
	var secs []Section
	for _, r := range roles {
		want, err := DumpRole(out, groupOf, r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r, err)
		}
		have, err := running(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r, err)
		}
		changes, err := Diff(have, want)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r, err)
		}
		if changes == nil {
			changes = []Change{}
		}
		title := r.String()
		if want.Group != "" && !strings.HasPrefix(want.Group, ir.SidecarGroupPrefix) && want.Group != r.NodeCluster && want.Group != "proxyless" {
			title += fmt.Sprintf(" (group %q)", want.Group)
		}
		secs = append(secs, Section{Role: r, Title: title, Group: want.Group, Changes: changes, Proxies: proxies[r]})
	}
	return secs, nil
}

// Summary counts a plan's changes over all its sections.
type Summary struct {
	Add, Change, Remove int
	// Roles is how many roles change; Proxies how many connected proxies
	// have one of them.
	Roles, Proxies int
}

// Summarize counts the changes of the sections keep accepts (nil: all).
func Summarize(secs []Section, keep func(Role) bool) Summary {
	var s Summary
	for _, sec := range secs {
		if keep != nil && !keep(sec.Role) || len(sec.Changes) == 0 {
			continue
		}
		s.Roles++
		s.Proxies += sec.Proxies
		for _, c := range sec.Changes {
			switch c.Action {
			case Add:
				s.Add++
			case Modify:
				s.Change++
			case Remove:
				s.Remove++
			}
		}
	}
	return s
}

// RenderSections prints the sections show accepts (nil: all) like
// terraform plan, then a summary over every section, and says how much
// of the plan was not shown.
func RenderSections(w io.Writer, secs []Section, show func(Role) bool) {
	shown := 0
	for _, sec := range secs {
		if show != nil && !show(sec.Role) {
			continue
		}
		shown++
		title := sec.Title + ":"
		if sec.Proxies > 0 {
			title = fmt.Sprintf("%s (%d connected):", sec.Title, sec.Proxies)
		}
		Render(w, title, sec.Changes)
	}
	all := Summarize(secs, nil)
	fmt.Fprintf(w, "\nPlan: %d to add, %d to change, %d to remove, in %d of %d roles, reaching %d connected proxies.\n",
		all.Add, all.Change, all.Remove, all.Roles, len(secs), all.Proxies)
	if show != nil {
		hidden := Summarize(secs, func(r Role) bool { return !show(r) })
		if hidden.Roles > 0 {
			fmt.Fprintf(w, "Not shown: %d role(s) with changes (%d to add, %d to change, %d to remove); drop -cluster/-node to see them.\n",
				hidden.Roles, hidden.Add, hidden.Change, hidden.Remove)
		}
	}
}

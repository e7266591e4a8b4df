package policy

import "github.com/hashicorp/hcl/v2"

// routeTestBlock is a `route_test "NAME" { ... }` block: an expectation
// about routing that `consul-xds-bridge test` checks. The policy only
// carries it (so policy files may hold their tests); package routetest
// decodes and runs it. It is no part of the routing policy and Merge
// ignores it.
type routeTestBlock struct {
	Name     string    `hcl:"name,label"`
	Body     hcl.Body  `hcl:",remain"`
	DefRange hcl.Range `hcl:",def_range"`
}

// RouteTestBlock is one raw route_test block of a document.
type RouteTestBlock struct {
	// Name is the block's label.
	Name string
	// Body is undecoded; package routetest decodes it.
	Body hcl.Body
	// DefRange is the block's header, `route_test "NAME"`.
	DefRange hcl.Range
}

// RouteTests returns the document's route_test blocks in source order.
func (d *Document) RouteTests() []RouteTestBlock {
	out := make([]RouteTestBlock, 0, len(d.routeTests))
	for _, b := range d.routeTests {
		out = append(out, RouteTestBlock{Name: b.Name, Body: b.Body, DefRange: b.DefRange})
	}
	return out
}

package pipeline

import (
	"errors"
	"slices"
	"testing"

	"github.com/consul-xds-bridge/consul-xds-bridge/xds"
)

// TestFailures: every failed group is listed in order, and the proxyless
// failure once, whether or not a group declared proxyless carries it (it
// used to be logged twice, or dropped when another group failed too).
func TestFailures(t *testing.T) {
	proxyless := errors.New("proxyless: bad")
	edge := errors.New(`proxy group "edge": bad`)
	for name, tc := range map[string]struct {
		out  *xds.Output
		want []string
	}{
		"groups sorted":                  {&xds.Output{Failed: map[string]error{"z": edge, "a": edge}}, []string{"a", "z"}},
		"proxyless alone":                {&xds.Output{ProxylessFailed: proxyless}, []string{""}},
		"proxyless and another group":    {&xds.Output{Failed: map[string]error{"edge": edge}, ProxylessFailed: proxyless}, []string{"edge", ""}},
		"proxyless via a declared group": {&xds.Output{Failed: map[string]error{"grpc": proxyless}, ProxylessFailed: proxyless}, []string{"grpc"}},
	} {
		var got []string
		for _, f := range (&World{Output: tc.out}).Failures() {
			got = append(got, f.Group)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: groups %q, want %q", name, got, tc.want)
		}
	}
}

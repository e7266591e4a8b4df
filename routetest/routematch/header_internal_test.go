package routematch

import (
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// TestMissingHeaderAndInvert: as in Envoy, a missing header fails a value
// match whether inverted or not; only an inverted presence match
// ("absent") matches it.
func TestMissingHeaderAndInvert(t *testing.T) {
	exact := &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "red"}}}
	for name, tc := range map[string]struct {
		h       *routev3.HeaderMatcher
		headers map[string]string
		want    bool
	}{
		"inverted exact, header missing":   {&routev3.HeaderMatcher{Name: "x-team", HeaderMatchSpecifier: exact, InvertMatch: true}, nil, false},
		"inverted exact, other value":      {&routev3.HeaderMatcher{Name: "x-team", HeaderMatchSpecifier: exact, InvertMatch: true}, map[string]string{"x-team": "blue"}, true},
		"inverted exact, same value":       {&routev3.HeaderMatcher{Name: "x-team", HeaderMatchSpecifier: exact, InvertMatch: true}, map[string]string{"x-team": "red"}, false},
		"inverted present, header missing": {&routev3.HeaderMatcher{Name: "x-team", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}, InvertMatch: true}, nil, true},
	} {
		if got := headerMatches(tc.h, Request{Headers: tc.headers}); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

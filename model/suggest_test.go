package model

import "testing"

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"wbe", "web", 1}, {"web", "web", 0}, {"api", "apj", 1}, {"kitten", "sitting", 3}, {"", "abc", 3}, {"billing", "biling", 1}} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

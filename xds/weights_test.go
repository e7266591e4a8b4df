package xds

import (
	"slices"
	"testing"
)

func TestPercentWeights(t *testing.T) {
	for name, tc := range map[string]struct{ in, want []uint32 }{
		"already 100":                {[]uint32{80, 20}, []uint32{80, 20}},
		"4/1, C-core's NACK":         {[]uint32{4, 1}, []uint32{80, 20}},
		"thirds: first of equals":    {[]uint32{1, 1, 1}, []uint32{34, 33, 33}},
		"largest remainder wins":     {[]uint32{1, 2}, []uint32{33, 67}},
		"2/1/1 exact":                {[]uint32{2, 1, 1}, []uint32{50, 25, 25}},
		"tiny share keeps 1":         {[]uint32{999, 1}, []uint32{99, 1}},
		"two tiny shares":            {[]uint32{9998, 1, 1}, []uint32{98, 1, 1}},
		"zero stays zero":            {[]uint32{3, 0, 1}, []uint32{75, 0, 25}},
		"all zero left as is":        {[]uint32{0, 0}, []uint32{0, 0}},
		"large weights, no overflow": {[]uint32{4_000_000_000, 4_000_000_000}, []uint32{50, 50}},
	} {
		t.Run(name, func(t *testing.T) {
			got := percentWeights(slices.Clone(tc.in))
			if !slices.Equal(got, tc.want) {
				t.Errorf("percentWeights(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
	// Every non-zero weight keeps a share while there are at most 100 of
	// them, and the sum is always 100.
	for n := 2; n <= 100; n++ {
		w := make([]uint32, n)
		w[0] = 1_000_000
		for i := 1; i < n; i++ {
			w[i] = 1
		}
		got := percentWeights(w)
		var sum uint32
		for i, v := range got {
			sum += v
			if v == 0 {
				t.Fatalf("n=%d: weight %d became 0: %v", n, i, got)
			}
		}
		if sum != 100 {
			t.Fatalf("n=%d: sum %d: %v", n, sum, got)
		}
	}
}

package xds

import "slices"

// percentWeights scales a split's weights to sum to exactly 100, for gRPC
// clients. gRFC A28 clients written before WeightedCluster.total_weight was
// deprecated (gRPC C-core and its wrappers up to at least 1.51) require the
// weights to add up to total_weight, whose default is 100, and NACK any
// other sum ("weighted_cluster has incorrect total weight"); newer clients
// use the sum of whatever weights they get, so 100 suits every one.
//
// Rounding is by largest remainder (Hamilton's method): every weight gets
// the floor of its exact share of 100, and the points still missing go to
// the largest fractional parts, ties to the earlier split, so the result
// is deterministic and each weight is within 1 of its exact share. A
// non-zero weight whose share rounds to 0 (under 1 % of the total) is
// raised to 1, taken from the largest weight, so no declared destination
// silently loses all traffic; that is only impossible with more than 100
// non-zero weights, where the smallest shares stay at 0. Weights that
// already sum to 100 are returned unchanged, and so is a split whose
// weights are all 0 (policy validation refuses it; nothing to scale).
func percentWeights(w []uint32) []uint32 {
	var total uint64
	for _, v := range w {
		total += uint64(v)
	}
	if total == 0 || total == 100 {
		return w
	}
	out := make([]uint32, len(w))
	rem := make([]uint64, len(w)) // remainder of v*100/total, in units of 1/total
	left := uint64(100)
	for i, v := range w {
		out[i] = uint32(uint64(v) * 100 / total)
		rem[i] = uint64(v) * 100 % total
		left -= uint64(out[i])
	}
	order := make([]int, len(w))
	for i := range order {
		order[i] = i
	}
	// Stable: equal remainders keep the declared order.
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case rem[a] > rem[b]:
			return -1
		case rem[a] < rem[b]:
			return 1
		}
		return 0
	})
	for _, i := range order[:left] {
		out[i]++
	}
	for i, v := range w {
		if v == 0 || out[i] > 0 {
			continue
		}
		// The largest weight gives a point, if it has one to spare;
		// the first of equals, again for determinism.
		donor := -1
		for j := range out {
			if out[j] > 1 && (donor < 0 || out[j] > out[donor]) {
				donor = j
			}
		}
		if donor < 0 {
			break
		}
		out[donor]--
		out[i] = 1
	}
	return out
}

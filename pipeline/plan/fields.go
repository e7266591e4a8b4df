package plan

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// maxFields bounds the field lines one changed resource prints: a
// rewritten listener would otherwise print hundreds.
const maxFields = 24

// fieldDiff lists what differs between two renderings of one resource,
// field by field, as "path: old → new" ("+ path: new", "- path: old"),
// sorted by path: a weight going 80 → 50 shows as
// `virtual_hosts[0].routes[0].route.weighted_clusters.clusters[0].weight: 80 → 50`.
// Lists are compared position by position, as Envoy reads them (routes
// and filter chains match in order). The renderings are the protojson of
// the resources, so the paths are the proto field names.
func fieldDiff(old, new []byte) []string {
	var o, n any
	if json.Unmarshal(old, &o) != nil || json.Unmarshal(new, &n) != nil {
		return nil
	}
	var out []string
	walkDiff("", o, n, &out)
	if len(out) > maxFields {
		out = append(out[:maxFields], fmt.Sprintf("… and %d more fields", len(out)-maxFields))
	}
	return out
}

func walkDiff(path string, o, n any, out *[]string) {
	switch ov := o.(type) {
	case map[string]any:
		if nv, ok := n.(map[string]any); ok {
			keys := slices.Sorted(maps.Keys(ov))
			for k := range nv {
				if _, ok := ov[k]; !ok {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				walkDiff(join(path, k), ov[k], nv[k], out)
			}
			return
		}
	case []any:
		if nv, ok := n.([]any); ok {
			for i := range max(len(ov), len(nv)) {
				var a, b any
				if i < len(ov) {
					a = ov[i]
				}
				if i < len(nv) {
					b = nv[i]
				}
				walkDiff(path+"["+strconv.Itoa(i)+"]", a, b, out)
			}
			return
		}
	}
	switch {
	case o == nil && n == nil:
	case o == nil:
		*out = append(*out, fmt.Sprintf("+ %s: %s", path, short(n)))
	case n == nil:
		*out = append(*out, fmt.Sprintf("- %s: %s", path, short(o)))
	default:
		if a, b := short(o), short(n); a != b {
			*out = append(*out, fmt.Sprintf("~ %s: %s → %s", path, a, b))
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// short renders a value on one line, long ones cut.
func short(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 120 {
		return string(b[:117]) + "…"
	}
	return string(b)
}

package model

import "fmt"

// didYouMean suggests the catalog service (of datacenter dc) or policy
// service block closest to a name that has no instances, for the most
// common policy mistake: `service = "wbe"` beside `service "web"`, a 503
// in production. "" when nothing is close (an edit distance of at most a
// third of the name, and 2).
func (b *builder) didYouMean(name, dc string) string {
	best, bestDist := "", min(2, len(name)/3)+1
	consider := func(c string) {
		if c == name {
			return
		}
		if d := editDistance(name, c); d < bestDist || d == bestDist && best != "" && c < best {
			best, bestDist = c, d
		}
	}
	if b.cat != nil {
		for _, s := range b.cat.Services {
			if s.Datacenter == dc && len(s.Instances) > 0 {
				consider(s.Name)
			}
		}
	}
	for _, s := range b.pol.Services {
		consider(s.ConsulName)
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b, by bytes
// (service names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

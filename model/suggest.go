package model

import "fmt"

// didYouMean suggests the catalog service (of datacenter dc) or policy
// service block closest to a name that has no instances, for the most
// common policy mistake: `service = "wbe"` beside `service "web"`, a 503
// in production. "" when nothing is close (an edit distance of at most a
// third of the name, at least 1 and at most 2; a swap of neighbours is 1).
func (b *builder) didYouMean(name, dc string) string {
	best, bestDist := "", max(1, min(2, len(name)/3))+1
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

// editDistance is the optimal string alignment distance between a and b,
// by bytes (service names are ASCII): Levenshtein's insertions,
// deletions and substitutions, and a swap of two neighbours counting
// one, the typo "wbe" for "web" is.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

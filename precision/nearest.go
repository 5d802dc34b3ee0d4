package precision

import (
	"slices"
	"strings"

	"github.com/weftml/weft/internal/suggest"
)

// nearest returns up to n module paths of scopes closest to pattern by
// edit distance, in that order (ties in model order); a kind rule gets the
// nearest kinds as "kind:" patterns.
func nearest(pattern string, scopes []Scope, n int) []string {
	var candidates []string
	target := pattern
	if strings.HasPrefix(pattern, "kind:") {
		for _, s := range scopes {
			if !slices.Contains(candidates, "kind:"+s.Kind) {
				candidates = append(candidates, "kind:"+s.Kind)
			}
		}
	} else {
		target = literal(pattern)
		for _, s := range scopes {
			if s.Path != "" {
				candidates = append(candidates, s.Path)
			}
		}
	}
	dist := make(map[string]int, len(candidates))
	for _, c := range candidates {
		dist[c] = suggest.EditDistance(target, c)
	}
	slices.SortStableFunc(candidates, func(a, b string) int { return dist[a] - dist[b] })
	return candidates[:min(n, len(candidates))]
}

// literal drops the wildcard segments of a path pattern ("nothere.**" is
// compared as "nothere").
func literal(pattern string) string {
	var segs []string
	for _, s := range strings.Split(pattern, ".") {
		if s != "*" && s != "**" {
			segs = append(segs, s)
		}
	}
	return strings.Join(segs, ".")
}

// Package suggest finds the accepted word a mistyped one was meant to be:
// the "did you mean" of weft's errors.
package suggest

import "strings"

// Closest is the candidate nearest word by edit distance if it is near
// enough to be a typo of it (at most a third of word's runes, and at least
// 1, differ), else the first candidate that word of 3 runes or more
// begins ("warmup" for "warmup_steps"), and whether there is one; ties go
// to the first.
func Closest(word string, candidates []string) (string, bool) {
	best, bestDist := "", -1
	for _, c := range candidates {
		if d := EditDistance(word, c); bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	if bestDist >= 0 && bestDist <= max(1, len([]rune(word))/3) {
		return best, true
	}
	for _, c := range candidates {
		if len([]rune(word)) >= 3 && strings.HasPrefix(c, word) {
			return c, true
		}
	}
	return "", false
}

// EditDistance is the number of rune insertions, deletions, substitutions
// and swaps of two neighbours that turn a into b (the optimal string
// alignment distance: "widht" is 1 from "width").
func EditDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	before, prev, cur := make([]int, len(rb)+1), make([]int, len(rb)+1), make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := range ra {
		cur[0] = i + 1
		for j := range rb {
			cost := 1
			if ra[i] == rb[j] {
				cost = 0
			}
			cur[j+1] = min(prev[j+1]+1, cur[j]+1, prev[j]+cost)
			if i > 0 && j > 0 && ra[i] == rb[j-1] && ra[i-1] == rb[j] {
				cur[j+1] = min(cur[j+1], before[j-1]+1)
			}
		}
		before, prev, cur = prev, cur, before
	}
	return prev[len(rb)]
}

//go:build !noasm

package vec

// geluAVX512 is geluGo for the first len(y)&^7 elements, the rest being the
// caller's, and needs len(cdf), len(x) >= len(y).
//
//go:noescape
func geluAVX512(y, cdf, x []float32)

// geluBackwardAVX512 is geluBackwardGo for the first len(dx)&^7 elements,
// the rest being the caller's, and needs len(x), len(cdf), len(dy) >=
// len(dx).
//
//go:noescape
func geluBackwardAVX512(dx, x, cdf, dy []float32)

//go:build !noasm

package vec

// adamWBF16AVX512 is adamWBF16Go for the first len(p)&^15 elements, the
// rest being the caller's, and needs len(g), len(m), len(v) >= len(p).
//
//go:noescape
func adamWBF16AVX512(p, g, m, v []float32, s AdamWParams, roundP, roundM, roundV bool)

//go:build !noasm

package vec

// absMaxAVX512 returns the largest |x| in xs, +0 if xs is empty, or a NaN
// (no particular one) if one is NaN; len(xs) is a multiple of sixteen.
//
//go:noescape
func absMaxAVX512(xs []float32) float32

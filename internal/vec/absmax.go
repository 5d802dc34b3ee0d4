package vec

import "math"

// AbsMax returns the largest |x| in xs, +0 if xs is empty, or a NaN if one
// is NaN, bit for bit absMaxGo's fold from +0 for every input. With
// AVX-512 it runs sixteen elements at a time, and the last len(xs)%16 in
// Go.
func AbsMax(xs []float32) float32 {
	m, n := float32(0), 0
	if useAVX512 {
		n = len(xs) &^ 15
		// The fold's NaN has whatever bits max gives it (on amd64, the OR
		// of its operands'), which the kernel does not track; a slice
		// with a NaN, rare, is folded again in Go.
		if m = absMaxAVX512(xs[:n]); m != m {
			m, n = 0, 0
		}
	}
	return absMaxGo(m, xs[n:])
}

// absMaxGo folds max(m, |x|) over xs.
func absMaxGo(m float32, xs []float32) float32 {
	for _, x := range xs {
		m = max(m, math.Float32frombits(math.Float32bits(x)&^(1<<31)))
	}
	return m
}

// Package vec holds vectorized elementwise kernels with pure-Go twins. Each
// kernel gives the same bits as its Go loop (the same operations in the same
// order, each rounded once: no fused multiply-add), so callers that match
// PyTorch bit for bit may use either.
package vec

import "math"

// AdamWParams are AdamW's per-step constants in float32 (see AdamW).
type AdamWParams struct {
	Decay         float32 // 1 - lr·weight_decay
	Lerp          float32 // 1 - β1
	Beta2         float32 // β2
	OneMinusBeta2 float32 // 1 - β2
	BC2Sqrt       float32 // sqrt(1 - β2^t)
	Eps           float32
	NegStep       float32 // -lr / (1 - β1^t)
}

// AdamW updates p, m and v in place with gradient g, element by element:
//
//	p = p·decay; m = m + lerp·(g-m); v = v·β2; v = v + (1-β2)·g·g
//	d = sqrt(v)/bc2sqrt + eps; p = p + negStep·(m/d)
//
// each operation rounded to float32, as PyTorch's single-tensor AdamW does
// op by op over float32 tensors. With AVX-512 it runs sixteen elements at a
// time, and the last len(p)%16 in Go. g, m and v need len(p) elements.
func AdamW(p, g, m, v []float32, s AdamWParams) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	n := 0
	if useAVX512 {
		n = len(p) &^ 15
		adamWAVX512(p[:n], g[:n], m[:n], v[:n], s)
	}
	adamWGo(p[n:], g[n:], m[n:], v[n:], s)
}

// adamWGo is AdamW in Go. The explicit float32 conversions round each
// product before it is added: without them the compiler may fuse a
// multiply-add (it does with GOAMD64=v3), which rounds once.
func adamWGo(p, g, m, v []float32, s AdamWParams) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	for i := range p {
		pi := float32(p[i] * s.Decay)
		mi := m[i] + float32(s.Lerp*(g[i]-m[i]))
		vi := float32(v[i] * s.Beta2)
		vi += float32(s.OneMinusBeta2 * g[i] * g[i])
		// The float64 square root rounded to float32 is the correctly
		// rounded float32 square root, VSQRTPS's result.
		d := float32(math.Sqrt(float64(vi)))/s.BC2Sqrt + s.Eps
		p[i] = pi + float32(s.NegStep*(mi/d))
		m[i], v[i] = mi, vi
	}
}

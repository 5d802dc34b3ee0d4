package vec

import "math"

// AdamWBF16 is AdamW over tensors that may be stored in bfloat16: roundP,
// roundM and roundV say which of p, m and v are. As PyTorch's op-by-op
// AdamW over such tensors, every operation that writes one of them rounds
// its float32 result to bfloat16, and d, computed from v, rounds as v does:
//
//	p = rp(p·decay); m = rm(m + lerp·(g-m)); v = rv(v·β2); v = rv(v + (1-β2)·g·g)
//	d = rv(sqrt(v)); d = rv(d/bc2sqrt); d = rv(d + eps); p = rp(p + negStep·(m/d))
//
// The values stay float32 (bfloat16 ones widened exactly); converting to
// the storage is the caller's. With nothing to round it is AdamW. With
// AVX-512 it runs sixteen elements at a time, and the last len(p)%16 in Go.
// g, m and v need len(p) elements.
func AdamWBF16(p, g, m, v []float32, s AdamWParams, roundP, roundM, roundV bool) {
	if !roundP && !roundM && !roundV {
		AdamW(p, g, m, v, s)
		return
	}
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	n := 0
	if useAVX512 {
		n = len(p) &^ 15
		adamWBF16AVX512(p[:n], g[:n], m[:n], v[:n], s, roundP, roundM, roundV)
	}
	adamWBF16Go(p[n:], g[n:], m[n:], v[n:], s, roundP, roundM, roundV)
}

// adamWBF16Go is AdamWBF16 in Go. As in adamWGo, the float32 conversions
// round each product before it is added, so that no build fuses a
// multiply-add.
func adamWBF16Go(p, g, m, v []float32, s AdamWParams, roundP, roundM, roundV bool) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	for i := range p {
		pi := roundBF16If(roundP, float32(p[i]*s.Decay))
		mi := roundBF16If(roundM, m[i]+float32(s.Lerp*(g[i]-m[i])))
		vi := roundBF16If(roundV, float32(v[i]*s.Beta2))
		vi = roundBF16If(roundV, vi+float32(s.OneMinusBeta2*g[i]*g[i]))
		d := roundBF16If(roundV, float32(math.Sqrt(float64(vi))))
		d = roundBF16If(roundV, d/s.BC2Sqrt)
		d = roundBF16If(roundV, d+s.Eps)
		p[i] = roundBF16If(roundP, pi+float32(s.NegStep*(mi/d)))
		m[i], v[i] = mi, vi
	}
}

// roundBF16If returns x rounded to bfloat16 if on, as dtype's BF16 Round
// does on the float32 bits: to nearest even at bit 16, or a NaN quieted,
// then the low half cleared.
func roundBF16If(on bool, x float32) float32 {
	if !on {
		return x
	}
	b := math.Float32bits(x)
	if b&0x7fffffff > 0x7f800000 {
		b |= 0x00400000
	} else {
		b += 0x7fff + b>>16&1
	}
	return math.Float32frombits(b &^ 0xffff)
}

package vec

import "math"

// ExpF32 sets dst[i] = float32(math.Exp(float64(src[i]))), bit for bit.
// With AVX-512 it runs eight elements at a time: the kernel evaluates e^x
// in float64 to far better than float32's precision, which then rounds to
// float32 as math.Exp's value does unless the two lie on either side of a
// float32 rounding boundary. The kernel stops at a block with a lane that
// close to one (one block in 30000 over all float32 in [-104, 89]),
// which Go then computes with math.Exp. dst needs len(src) elements and
// may be src.
func ExpF32(dst, src []float32) {
	dst = dst[:len(src)]
	if useAVX512 {
		for full := len(src) &^ 7; full > 0; full = len(src) &^ 7 {
			n := expAVX512(dst[:full], src[:full])
			if n < full {
				expGo(dst[n:n+8], src[n:n+8])
				n += 8
			}
			dst, src = dst[n:], src[n:]
		}
	}
	expGo(dst, src)
}

// expGo is ExpF32 in Go: its definition.
func expGo(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = float32(math.Exp(float64(v)))
	}
}

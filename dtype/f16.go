package dtype

import "math"

// toF16 is F16FromF32 (minifloat.encode for F16) with the format's constants
// folded in, small enough to inline into the bulk loops.
func toF16(x float32) uint16 {
	b := math.Float32bits(x)
	sign := uint16(b>>16) & 0x8000
	a := b &^ (1 << 31)
	switch {
	case a > 0x7f800000:
		return sign | 0x7e00 // NaN: quiet, payload dropped, sign kept
	case a >= 0x38800000: // 2^-14, the smallest normal half
		// Rebias the exponent by 127-15 and keep 10 mantissa bits, ties to
		// even; a carry runs into the exponent, and anything past 65504,
		// inf included, is capped at inf's code 0x7c00.
		return sign | uint16(min((a-0x38000000+0xfff+a>>13&1)>>13, 0x7c00))
	default:
		// Next to 0.5, whose ulp is the smallest half subnormal 2^-24, the
		// float32 adder rounds |x| to whole subnormal steps, and the sum's
		// low bits count them.
		return sign | uint16(math.Float32bits(math.Float32frombits(a)+0.5)-0x3f000000)
	}
}

// fromF16 is F32FromF16 (minifloat.decode for F16) with the format's
// constants folded in, just small enough to inline (cost 80, the budget).
// Every NaN becomes float32(math.NaN()), 0x7fc00000, sign kept, as there.
func fromF16(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	switch mag := uint32(h & 0x7fff); {
	case mag > 0x7c00:
		return math.Float32frombits(sign | 0x7fc00000)
	case mag == 0x7c00:
		return math.Float32frombits(sign | 0x7f800000)
	case mag >= 0x400: // normal: rebias the exponent by 127-15
		return math.Float32frombits(sign | (mag<<13 + 0x38000000))
	default: // subnormal: mag·2^-24, both factors and the product exact
		return math.Float32frombits(sign | math.Float32bits(float32(mag)*0x1p-24))
	}
}

// encodeF16 rounds src to half codes, clamping to ±lim first (+Inf: no
// clamp), like encodeBF16; with AVX-512, sixteen at a time.
func encodeF16(dst []uint16, src []float32, lim float32) {
	dst = dst[:len(src)]
	if useAVX512 {
		n := len(src) &^ 15
		encodeF16AVX512(dst, src, lim)
		dst, src = dst[n:], src[n:]
	}
	if lim > math.MaxFloat32 { // no clamp
		for i, x := range src {
			dst[i] = toF16(x)
		}
		return
	}
	for i, x := range src {
		dst[i] = toF16(clamp(x, lim))
	}
}

// decodeF16 widens half codes to float32, exactly; with AVX-512, sixteen at
// a time.
func decodeF16(dst []float32, src []uint16) {
	src = src[:len(dst)]
	if useAVX512 {
		n := len(dst) &^ 15
		decodeF16AVX512(dst, src)
		dst, src = dst[n:], src[n:]
	}
	for i, h := range src {
		dst[i] = fromF16(h)
	}
}

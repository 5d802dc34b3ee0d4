package dtype

import "math"

// RoundFloat32s rounds every element of xs in place to the nearest value of
// d, as d.Round does, bit for bit. BF16 and F16, the storage dtypes whose
// optimizer steps round after every op, run without the per-element
// dispatch of Round; with AVX-512, both run sixteen at a time.
func RoundFloat32s(d DType, xs []float32) {
	switch d {
	case F32, F64:
		return
	case BF16:
		roundBF16(xs)
	case F16:
		roundF16s(xs)
	default:
		for i, x := range xs {
			xs[i] = d.Round(x)
		}
	}
}

// roundBF16 is F32FromBF16(BF16FromF32(x)) for every element, on the float32
// bits: round to nearest even at bit 16, or quiet a NaN, then clear the low
// half.
func roundBF16(xs []float32) {
	if useAVX512 {
		n := len(xs) &^ 15
		roundBF16AVX512(xs)
		xs = xs[n:]
	}
	for i, x := range xs {
		b := math.Float32bits(x)
		if b&0x7fffffff > 0x7f800000 {
			b |= 0x00400000
		} else {
			b += 0x7fff + b>>16&1
		}
		xs[i] = math.Float32frombits(b &^ 0xffff)
	}
}

// roundF16s is roundF16 for every element; with AVX-512, through half
// codes and back, sixteen at a time, which is what roundF16 computes.
func roundF16s(xs []float32) {
	if !useAVX512 {
		for i, x := range xs {
			xs[i] = roundF16(x)
		}
		return
	}
	var codes [256]uint16 // a chunk of halves, on the stack
	for len(xs) > 0 {
		n := min(len(xs), len(codes))
		encodeF16(codes[:n], xs[:n], float32(math.Inf(1)))
		decodeF16(xs[:n], codes[:n])
		xs = xs[n:]
	}
}

// roundF16 is F32FromF16(F16FromF32(x)) computed in float32 bits, without
// the half-precision code in between.
func roundF16(x float32) float32 {
	b := math.Float32bits(x)
	sign := b & 0x80000000
	a := b ^ sign
	var r uint32
	switch {
	case a > 0x7f800000:
		r = 0x7fc00000 // the NaN F32FromF16 decodes every half NaN to
	case a >= 0x38800000: // 2^-14, the smallest normal half
		// Keep 10 mantissa bits, ties to even; from 2^16, the step past
		// the largest half, 65504, the result is inf, as it is for inf.
		if r = (a + 0xfff + a>>13&1) &^ 0x1fff; r >= 0x47800000 {
			r = 0x7f800000
		}
	default:
		// Next to 0.5, whose ulp is the smallest half subnormal 2^-24, the
		// float32 adder rounds |x| to whole subnormal steps; taking 0.5
		// away again is exact.
		s := math.Float32frombits(a) + 0.5
		r = math.Float32bits(s - 0.5)
	}
	return math.Float32frombits(r | sign)
}

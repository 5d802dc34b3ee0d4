package dtype

import "math"

// minifloat describes a binary floating-point format narrower than float32
// with a sign bit, exponent and mantissa, so that one rounding routine and
// one decoder serve all of them. Beyond widths and biases they differ only in
// their special values, which the first fields spell out; the rest are
// derived from them.
type minifloat struct {
	man    uint32    // mantissa bits
	bias   int32     // exponent bias
	sign   uint32    // sign bit of a code
	maxMag uint32    // magnitude code of the largest finite value
	ovf    uint32    // magnitude code of an overflow: inf, NaN, or maxMag for formats that always saturate
	nan    [2]uint32 // codes a positive and a negative NaN input become
	inf    bool      // maxMag+1 encodes infinity and codes above it NaN (IEEE style)
	uz     bool      // unsigned zero: the negative-zero pattern is NaN, so -0 encodes as +0 (fnuz)

	shift   uint32  // 23 - man: the float32 mantissa bits to round off
	half    uint32  // 1<<(shift-1) - 1: added with the kept LSB, rounds to nearest even
	rebias  uint32  // (127-bias)<<23: float32 exponent field minus the target's
	minNorm uint32  // float32 bits of the smallest normal value
	magic   float32 // 2^(24-bias-man), whose ulp is the smallest subnormal
	scale   float32 // 2^(127-bias): takes a code shifted into float32 position to its value
}

// newMinifloat fills in the derived fields of f.
func newMinifloat(f minifloat) *minifloat {
	exp := func(e int32) uint32 { return uint32(e+127) << 23 } // float32 bits of 2^e
	f.shift = 23 - f.man
	f.half = 1<<(f.shift-1) - 1
	f.rebias = exp(-f.bias)
	f.minNorm = exp(1 - f.bias)
	f.magic = math.Float32frombits(exp(24 - f.bias - int32(f.man)))
	f.scale = math.Float32frombits(exp(127 - f.bias))
	return &f
}

// minifloats holds the formats encoded by minifloat. BF16 and E8M0 have
// their own code: bf16 is float32 cut short, and E8M0 has neither sign nor
// mantissa nor zero.
var minifloats = [numDTypes]*minifloat{
	// PyTorch (c10::Half, Float8_e4m3fn, Float8_e5m2): IEEE overflow to inf,
	// except e4m3fn, which has no inf and overflows to NaN.
	F16:    newMinifloat(minifloat{man: 10, bias: 15, sign: 0x8000, maxMag: 0x7bff, ovf: 0x7c00, nan: [2]uint32{0x7e00, 0xfe00}, inf: true}),
	E4M3FN: newMinifloat(minifloat{man: 3, bias: 7, sign: 0x80, maxMag: 0x7e, ovf: 0x7f, nan: [2]uint32{0x7f, 0xff}}),
	E5M2:   newMinifloat(minifloat{man: 2, bias: 15, sign: 0x80, maxMag: 0x7b, ovf: 0x7c, nan: [2]uint32{0x7f, 0xff}, inf: true}),
	// ml_dtypes: overflow and inf become the single NaN 0x80; zero is unsigned.
	E4M3FNUZ: newMinifloat(minifloat{man: 3, bias: 8, sign: 0x80, maxMag: 0x7f, ovf: 0x80, nan: [2]uint32{0x80, 0x80}, uz: true}),
	E5M2FNUZ: newMinifloat(minifloat{man: 2, bias: 16, sign: 0x80, maxMag: 0x7f, ovf: 0x80, nan: [2]uint32{0x80, 0x80}, uz: true}),
	// ml_dtypes: no inf or NaN, so overflow and inf saturate to ±6. NaN maps
	// to the code ml_dtypes uses as its NaN stand-in, 0b1000 (-0), and its
	// negation flips the sign bit, so -NaN gives +0.
	E2M1: newMinifloat(minifloat{man: 1, bias: 1, sign: 0x8, maxMag: 0x7, ovf: 0x7, nan: [2]uint32{0x8, 0x0}}),
}

// encode rounds x to the nearest code, ties to even, without saturation.
func (f *minifloat) encode(x float32) uint32 {
	b := math.Float32bits(x)
	sign := b >> 31
	a := b &^ (1 << 31)
	var r uint32
	switch {
	case a > 0x7f800000:
		return f.nan[sign]
	case a >= f.minNorm:
		// Rebias the exponent and round off the low mantissa bits; a carry
		// moves into the exponent, and past the largest finite value to be
		// caught below, just as inf's exponent is.
		r = (a - f.rebias + f.half + a>>f.shift&1) >> f.shift
	default:
		// Below the normal range the float32 adder rounds for us: next to
		// magic, whose ulp is the smallest subnormal, |x| keeps only whole
		// subnormal steps, and the sum's low bits count them. Rounding up
		// to 1<<man lands on the smallest normal code, as it should.
		r = math.Float32bits(math.Float32frombits(a)+f.magic) - math.Float32bits(f.magic)
	}
	r = min(r, f.ovf)
	if f.uz && r == 0 {
		sign = 0
	}
	return r | -sign&f.sign
}

// decode returns the value of code c; bits above the format's width are
// ignored.
func (f *minifloat) decode(c uint32) float32 {
	c &= f.sign<<1 - 1
	mag := c &^ f.sign
	var v float32
	switch {
	case f.uz && c == f.sign:
		return float32(math.NaN())
	case mag <= f.maxMag:
		// The code's exponent and mantissa fields, placed where float32 keeps
		// them, read as a float32 off by exactly 2^(bias-127); subnormal codes
		// land on float32 subnormals and scale just as exactly.
		v = math.Float32frombits(mag<<(23-f.man)) * f.scale
	case f.inf && mag == f.maxMag+1:
		v = float32(math.Inf(1))
	default:
		v = float32(math.NaN())
	}
	if c&f.sign != 0 {
		v = -v
	}
	return v
}

// encodeE8M0 casts x to float8_e8m0fnu as ml_dtypes does. The format holds
// only 2^-127..2^127 and NaN, so zero, negative numbers, inf and NaN all
// give NaN. ml_dtypes rounds its one-bit "mantissa" up on ties (1.5·2^e
// becomes 2^(e+1)) instead of to an even exponent, and rounds every float32
// subnormal above 2^-127 up to 2^-126 and the rest to 2^-127.
func encodeE8M0(x float32) uint32 {
	b := math.Float32bits(x)
	switch {
	case b == 0 || b >= 0x7f800000: // +0, +inf, NaN and everything with the sign bit set
		return 0xff
	case b < 0x00800000:
		if b > 0x00400000 {
			return 1
		}
		return 0
	}
	// The exponent field is already the code; 2^127·1.5 and up carry into 0xff.
	return b>>23 + b>>22&1
}

// decodeE8M0 returns 2^(c-127), or NaN for 0xff.
func decodeE8M0(c uint32) float32 {
	switch c &= 0xff; c {
	case 0xff:
		return float32(math.NaN())
	case 0:
		return 0x1p-127
	}
	return math.Float32frombits(c << 23)
}

// roundInt rounds x to the nearest integer, ties to even, saturating to
// [lo, hi]; NaN gives 0. This is quantization's cast, not C's truncation.
func roundInt(x float64, lo, hi int64) int64 {
	switch r := math.RoundToEven(x); {
	case r != r:
		return 0
	case r <= float64(lo):
		return lo
	case r >= float64(hi): // float64(hi) may round up to 2^63, which int64 cannot hold
		return hi
	default:
		return int64(r)
	}
}

// clamp limits x to [-lim, lim], keeping NaN. (The min and max builtins
// would do, but their signed-zero handling costs several instructions.)
func clamp[T float32 | float64](x, lim T) T {
	switch {
	case x > lim:
		return lim
	case x < -lim:
		return -lim
	}
	return x
}

// limit is the bound a cast to d clamps to first: Max when saturating a
// float format, +Inf (no bound) otherwise. Integer casts always saturate.
func (d DType) limit(sat bool) float64 {
	if sat && d.IsFloat() {
		return d.Max()
	}
	return math.Inf(1)
}

// BF16FromF32 rounds x to bfloat16, ties to even, overflowing to inf; NaN
// stays NaN (quieted, sign kept).
func BF16FromF32(x float32) uint16 {
	b := math.Float32bits(x)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + b>>16&1) >> 16)
}

// BF16StochasticRound rounds x to bfloat16 stochastically with the random
// 16 bits r, as torchao's _fp32_to_bf16_sr does for its optimizers'
// bf16_stochastic_round: x's float32 bits keep their top 16 and go one
// away from zero when r is below their low 16, so x rounds away from zero
// with probability low/2^16 and its expectation is x. Inf and ±0 stay, the
// largest finite numbers may round to inf, and denormals round alike.
// NaN stays NaN, quieted with its sign kept, as BF16FromF32 leaves it
// (torchao's bit trick would turn a NaN whose payload lies in the low 16
// bits alone into inf). The reference loop:
//
//	b := math.Float32bits(x)
//	if b&0x7fffffff > 0x7f800000 { return BF16FromF32(x) }
//	if uint32(r) < b&0xffff { b += 0x10000 }
//	return uint16(b >> 16)
func BF16StochasticRound(x float32, r uint16) uint16 {
	b := math.Float32bits(x)
	if b&0x7fffffff > 0x7f800000 {
		return BF16FromF32(x)
	}
	if uint32(r) < b&0xffff {
		b += 0x10000
	}
	return uint16(b >> 16)
}

// F32FromBF16 returns the value of bfloat16 bits b, exactly.
func F32FromBF16(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F16FromF32 rounds x to IEEE half, ties to even, overflowing to inf.
func F16FromF32(x float32) uint16 { return uint16(minifloats[F16].encode(x)) }

// F32FromF16 returns the value of half bits b, exactly.
func F32FromF16(b uint16) float32 { return minifloats[F16].decode(uint32(b)) }

// Encode returns the bit pattern of x cast to d, rounding to nearest, ties
// to even. With sat false, overflow behaves like PyTorch's x.to(dtype) (or
// ml_dtypes' astype for the formats PyTorch lacks): inf for formats that
// have it, NaN for the others (e4m3fn, fnuz, e8m0), ±6 for E2M1, which has
// neither. With sat true, x is first clamped to ±Max (inf becomes ±Max, NaN
// stays NaN): the saturating cast that FP8 training uses. E8M0 has no zero
// and no negative values, so those give NaN either way. Integer formats
// round to nearest even and saturate either way; NaN gives 0. F64 and I64
// patterns do not fit in 32 bits: Encode panics for them, so use the bulk
// Encode.
func (d DType) Encode(x float32, sat bool) uint32 {
	x = clamp(x, float32(d.limit(sat)))
	switch d {
	case F32:
		return math.Float32bits(x)
	case BF16:
		return uint32(BF16FromF32(x))
	case E8M0:
		return encodeE8M0(x)
	case I8:
		return uint32(uint8(roundInt(float64(x), math.MinInt8, math.MaxInt8)))
	case I32:
		return uint32(roundInt(float64(x), math.MinInt32, math.MaxInt32))
	}
	if f := d.minifloat(); f != nil {
		return f.encode(x)
	}
	panic("dtype: scalar Encode does not support " + d.String())
}

// Decode returns the exact value of bit pattern c of d (integers: the
// integer value, rounded to float32); bits above d's width are ignored.
// Like Encode, it panics for F64 and I64.
func (d DType) Decode(c uint32) float32 {
	switch d {
	case F32:
		return math.Float32frombits(c)
	case BF16:
		return F32FromBF16(uint16(c))
	case E8M0:
		return decodeE8M0(c)
	case I8:
		return float32(int8(c))
	case I32:
		return float32(int32(c))
	}
	if f := d.minifloat(); f != nil {
		return f.decode(c)
	}
	panic("dtype: scalar Decode does not support " + d.String())
}

// Round returns x rounded to the nearest value of d: Decode(Encode(x, false)),
// extended to F64 (x itself) and I64.
func (d DType) Round(x float32) float32 { return d.round(x, false) }

// RoundSat is Round with the saturating cast: Decode(Encode(x, true)).
func (d DType) RoundSat(x float32) float32 { return d.round(x, true) }

func (d DType) round(x float32, sat bool) float32 {
	switch d {
	case F64:
		return x
	case I64:
		return float32(roundInt(float64(x), math.MinInt64, math.MaxInt64))
	}
	return d.Decode(d.Encode(x, sat))
}

// minifloat returns d's minifloat description, or nil.
func (d DType) minifloat() *minifloat {
	if d >= numDTypes {
		return nil
	}
	return minifloats[d]
}

package tensor_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// The op tests compare each kernel with a float64 reference that has the
// engine's rounding points: inputs are taken as stored (decoding them to
// float32 or float64 is exact), the op is computed exactly (up to float64
// error), and the result is rounded once to the output dtype. The kernel
// computes in float32 (float64 for F64 results), so its value before that
// final rounding may differ from the exact one by the error its arithmetic
// can make; a reference states that bound per element, derived from the
// op's arithmetic (see gamma), never from observed differences.
//
// Rounding is monotone, so the kernel's output must lie between the
// roundings of exact−bound and exact+bound. For a 16-bit output the bound
// is far below half an ulp almost everywhere, so this asks for the exactly
// rounded value, or its neighbour where the exact value lies within the
// bound of a rounding boundary (where float32 accumulation order can flip
// the rounding: at most 1 ulp). Where a sum cancels, the bound is relative
// to the sum of the magnitudes of its terms, as it must be. An op whose
// only arithmetic is one rounded operation (Add, Scale) has bound 0 and
// must match bit for bit.

// expect is the reference result for one output of an op.
type expect struct {
	dt      dtype.DType // the output's dtype
	compute dtype.DType // F32 or F64: the type the kernel computes in
	shape   []int
	val     []float64 // exact values
	bound   []float64 // error bound of the compute arithmetic; nil when the op is exact
	sat     bool      // the final rounding saturates
}

// format describes a binary floating-point format for roundTo, which
// rounds independently of package dtype.
type format struct {
	precision int     // significand bits, the implicit one included
	emin      int     // exponent of the smallest normal
	max       float64 // largest finite value
	nanOnOver bool    // overflow gives NaN (e4m3fn has no infinity)
}

var formats = map[dtype.DType]format{
	dtype.F32:    {24, -126, math.MaxFloat32, false},
	dtype.BF16:   {8, -126, 0x1.fep127, false},
	dtype.F16:    {11, -14, 65504, false},
	dtype.E4M3FN: {4, -6, 448, true},
	dtype.E5M2:   {3, -14, 57344, false},
}

func formatOf(dt dtype.DType) format {
	f, ok := formats[dt]
	if !ok {
		panic(fmt.Sprintf("no format for %v", dt))
	}
	return f
}

// roundTo rounds v to the nearest value of f, ties to even; beyond the
// largest finite value it overflows (to ±Inf, or NaN for e4m3fn) unless
// sat clamps v to ±max first, as PyTorch's saturating FP8 casts do.
func roundTo(v float64, f format, sat bool) float64 {
	switch {
	case math.IsNaN(v) || v == 0:
		return v
	case sat:
		v = max(-f.max, min(v, f.max))
	case math.IsInf(v, 0) && f.nanOnOver:
		return math.NaN()
	case math.IsInf(v, 0):
		return v
	}
	ulp := math.Ldexp(1, max(math.Ilogb(v), f.emin)-(f.precision-1)) // subnormals share emin's spacing
	q := math.Copysign(math.RoundToEven(v/ulp)*ulp, v)
	switch {
	case math.Abs(q) <= f.max:
		return q
	case f.nanOnOver:
		return math.NaN()
	}
	return math.Copysign(math.Inf(1), v)
}

// unitRoundoff is the largest relative error of rounding to dt in its
// normal range: 2^-precision.
func unitRoundoff(dt dtype.DType) float64 {
	if dt == dtype.F64 {
		return 0x1p-53
	}
	return math.Ldexp(1, -formatOf(dt).precision)
}

// boundRoundoff is the unit roundoff the bounds of a formula evaluated in
// compute use: the kernel's, plus float64's for the reference's own
// evaluation of the same formula.
func boundRoundoff(compute dtype.DType) float64 {
	return unitRoundoff(compute) + unitRoundoff(dtype.F64)
}

// computeOf is the compute type of an output of dtype dt.
func computeOf(dt dtype.DType) dtype.DType {
	if dt == dtype.F64 {
		return dtype.F64
	}
	return dtype.F32
}

// gamma is Higham's γ_n = n·u/(1-n·u): a value reached through n rounded
// operations (a sum or dot product of n terms in any order, products
// included) carries a relative error of at most γ_n of the magnitudes
// involved, in a type of unit roundoff u.
func gamma(n int, u float64) float64 { return float64(n) * u / (1 - float64(n)*u) }

// bounded returns the reference for a result whose element i carries the
// error of n rounded operations in the compute type on terms of magnitude
// abs[i]: γ_n·abs[i], plus the reference's own float64 error (γ_{n+2}
// also covers forming exact±bound) and, for float32, n times the smallest
// normal (the BF16 dot-product kernel flushes subnormals).
func bounded(dt, compute dtype.DType, shape []int, val, abs []float64, n int) expect {
	e := expect{dt: dt, compute: compute, shape: shape, val: val, bound: make([]float64, len(val))}
	g := gamma(n, unitRoundoff(compute)) + gamma(n+2, unitRoundoff(dtype.F64))
	tiny := 0.0
	if compute == dtype.F32 {
		tiny = float64(n) * 0x1p-126
	}
	for i, a := range abs {
		e.bound[i] = g*a + tiny
	}
	return e
}

// exact returns the reference for a result that is the exact value rounded
// once to dt (through float32 for a float32 compute type).
func exact(dt dtype.DType, shape []int, val []float64) expect {
	return expect{dt: dt, compute: computeOf(dt), shape: shape, val: val}
}

// round rounds an exact value as the kernel's last step does: to the
// compute type, then to the output dtype. F64 results of float32
// arithmetic are float32 values widened, and casts from float64 go
// through float32 as PyTorch's do.
func (e expect) round(v float64) float64 {
	x := v
	if e.compute != dtype.F64 || e.dt != dtype.F64 {
		x = float64(float32(v))
	}
	switch {
	case e.dt == dtype.F64 && e.sat:
		return max(-math.MaxFloat64, min(x, math.MaxFloat64))
	case e.dt == dtype.F64 || e.dt == dtype.F32 && !e.sat:
		return x
	}
	return roundTo(x, formatOf(e.dt), e.sat)
}

// check fails unless got has e's dtype and shape and every element lies
// between the roundings of val∓bound (equals the rounding of val, sign of
// zero included, when the op is exact). NaN must give NaN.
func check(t *testing.T, what string, got *tensor.Tensor, e expect) {
	t.Helper()
	if got.DType() != e.dt || !tensor.EqualShape(got.Shape(), e.shape) {
		t.Fatalf("%s: got %v, want %v%v", what, got, e.dt, e.shape)
	}
	bad := 0
	for i, g := range got.Float64s() {
		v := e.val[i]
		lo, hi := e.round(v), e.round(v)
		var ok bool
		switch {
		case math.IsNaN(lo):
			ok = math.IsNaN(g)
		case e.bound == nil:
			ok = g == lo && math.Signbit(g) == math.Signbit(lo)
		default:
			b := e.bound[i]
			if e.dt == dtype.F64 && e.compute == dtype.F64 {
				b += 0x1p-52 * (math.Abs(v) + b) // the result's own rounding, which round does not emulate
			}
			lo, hi = e.round(v-b), e.round(v+b)
			ok = lo <= g && g <= hi
		}
		if !ok {
			t.Errorf("%s[%d] = %.9g, want %.9g (exact) rounded into [%.9g, %.9g]", what, i, g, v, lo, hi)
			if bad++; bad == 5 {
				t.FailNow()
			}
		}
	}
}

package tensor_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// The op tests compare each kernel with a float64 reference that has the
// engine's rounding points: inputs are taken as stored (decoding to
// float32 or float64 is exact), the op is computed exactly (up to float64
// error), and the result is rounded once to the output dtype. The kernel
// computes in float32 (float64 for F64 results), so its value before that
// final rounding may differ from the exact one by the error its arithmetic
// can make; a reference states that bound per element.
//
// Rounding is monotone, so the kernel's output must lie between the
// roundings of exact−bound and exact+bound. For a 16-bit output the bound
// is far below half an ulp almost everywhere, so this asks for the exactly
// rounded value, or its neighbour where the exact value lies within the
// bound of a rounding boundary (where float32 accumulation order can flip
// the rounding). Where a sum cancels, the bound is relative to the sum of
// the magnitudes of its terms, as it must be.

// expect is the reference result for one output of an op.
type expect struct {
	dt      dtype.DType // the output's dtype
	compute dtype.DType // F32 or F64: the type the kernel computes in
	shape   []int
	val     []float64 // exact values
	bound   []float64 // error bound of the compute arithmetic; nil when the op is exact
	sat     bool      // the final rounding saturates
}

// unitRoundoff is half the gap between 1 and the next value of dt: the
// largest relative error of rounding to dt in its normal range.
func unitRoundoff(dt dtype.DType) float64 {
	bits := map[dtype.DType]int{dtype.F64: 53, dtype.F32: 24, dtype.BF16: 8, dtype.F16: 11,
		dtype.E4M3FN: 4, dtype.E5M2: 3}[dt] // significand bits, the implicit one included
	if bits == 0 {
		panic(fmt.Sprintf("no unit roundoff for %v", dt))
	}
	return math.Ldexp(1, -bits)
}

// computeOf is the compute type of an output of dtype dt.
func computeOf(dt dtype.DType) dtype.DType {
	if dt == dtype.F64 {
		return dtype.F64
	}
	return dtype.F32
}

// gamma is Higham's γ_n = n·u/(1-n·u): a sum or dot product of n terms
// computed in any order in a type of unit roundoff u is within γ_n·Σ|terms|
// of the exact one.
func gamma(n int, u float64) float64 { return float64(n) * u / (1 - float64(n)*u) }

// accumulated returns the reference for a result whose elements are sums
// of at most n terms (products included) computed in compute: the bound on
// element i is γ_n·abs[i] in the compute type, plus the reference's own
// float64 error (γ_{n+2}·abs[i] also covers forming exact±bound).
func accumulated(dt, compute dtype.DType, shape []int, val, abs []float64, n int) expect {
	e := expect{dt: dt, compute: compute, shape: shape, val: val, bound: make([]float64, len(val))}
	g := gamma(n, unitRoundoff(compute)) + gamma(n+2, unitRoundoff(dtype.F64))
	for i, a := range abs {
		e.bound[i] = g * a
	}
	return e
}

// round rounds an exact value as the kernel's last step does: to the
// compute type, then to the output dtype.
func (e expect) round(v float64) float64 {
	if e.compute == dtype.F64 {
		if e.dt == dtype.F64 {
			return v
		}
		b := make([]byte, e.dt.StorageBytes(1))
		dtype.EncodeF64(e.dt, b, []float64{v}, e.sat)
		out := make([]float64, 1)
		dtype.DecodeF64(e.dt, out, b)
		return out[0]
	}
	x := float32(v)
	switch {
	case e.dt == dtype.F32 || e.dt == dtype.F64:
		return float64(x)
	case e.sat:
		return float64(e.dt.RoundSat(x))
	}
	return float64(e.dt.Round(x))
}

// check fails unless got has e's dtype and shape and every element lies
// between the roundings of val∓bound (equals the rounding of val, sign of
// zero included, when the op is exact).
func check(t *testing.T, what string, got *tensor.Tensor, e expect) {
	t.Helper()
	if got.DType() != e.dt || !tensor.EqualShape(got.Shape(), e.shape) {
		t.Fatalf("%s: got %v, want %v%v", what, got, e.dt, e.shape)
	}
	bad := 0
	for i, g := range got.Float64s() {
		v := e.val[i]
		var ok bool
		var lo, hi float64
		switch {
		case math.IsNaN(v):
			ok = math.IsNaN(g)
		case e.bound == nil:
			lo, hi = e.round(v), e.round(v)
			ok = g == lo && math.Signbit(g) == math.Signbit(lo) || math.IsNaN(g) && math.IsNaN(lo)
		default:
			lo, hi = e.round(v-e.bound[i]), e.round(v+e.bound[i])
			ok = lo <= g && g <= hi
		}
		if !ok {
			t.Errorf("%s[%d] = %.9g, want %.9g (exact) rounded into [%.9g, %.9g]", what, i, g, v, lo, hi)
			if bad++; bad == 5 {
				return
			}
		}
	}
}

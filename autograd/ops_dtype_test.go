package autograd_test

import (
	"math"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// TestGradientsLowPrecision runs TestGradients' cases with every input in
// bf16 and f16: every op, forward and backward, then computes in float32
// and rounds its result to the dtype, and each gradient reaches its
// parameter in the parameter's dtype. The reference is the float64 tape
// (which TestGradients checks against finite differences) on the same
// values, exactly widened.
//
// Tolerance, from the format's unit roundoff u: each rounding to the dtype
// perturbs a value relatively by at most u; a gradient's longest path
// takes L of them (the seed Σ r·out rounds r, the forward value a backward
// reads, the backward's result, its cast into the gradient: L = 4 for one
// op), and the linear maps after each amplify a normwise relative error by
// their condition, taken as κ = 4 for these small random inputs (softmax
// and LayerNorm backward cancel part of their input). So the gradient's
// normwise relative error is at most κ·L·u. The float32 accumulation
// error, γ_k with k ≤ 60 terms here, is below u/4 for f16 and ignored.
func TestGradientsLowPrecision(t *testing.T) {
	const kappa = 4
	for _, c := range gradCases() {
		for _, dt := range []dtype.DType{dtype.BF16, dtype.F16} {
			t.Run(c.name+"/"+dt.String(), func(t *testing.T) {
				low, exact := make([]*tensor.Tensor, len(c.inputs)), make([]*tensor.Tensor, len(c.inputs))
				for i, in := range c.inputs {
					low[i] = in.To(dt)
					exact[i] = low[i].To(dtype.F64)
				}
				_, want := backward(t, c.build, exact...)
				_, got := backward(t, c.build, low...)
				tol := kappa * float64(roundingsOn(c.name)) * unitRoundoff(dt)
				for i := range got {
					if d, n := distance(got[i], want[i]), want[i].Norm(); d > tol*n {
						t.Errorf("input %d: |%v gradient − float64| = %.3g, more than %.3g of |float64| = %.3g", i, dt, d, tol, n)
					}
				}
			})
		}
	}
}

// roundingsOn is L for a case of gradCases: 4 for one op (see above);
// attention's query gradient passes the seed, dAtt = dOut·vᵀ, the scores,
// their scaling and softmax (read by its backward), softmax's backward,
// the scale's backward and dQ = dS·k.
func roundingsOn(name string) int {
	if name == "Attention" {
		return 8
	}
	return 4
}

// unitRoundoff is 2^-p for a format of p significand bits.
func unitRoundoff(dt dtype.DType) float64 {
	return map[dtype.DType]float64{dtype.BF16: 0x1p-8, dtype.F16: 0x1p-11}[dt]
}

func distance(a, b *tensor.Tensor) float64 {
	var s float64
	bs := b.Float64s()
	for i, v := range a.Float64s() {
		s += (v - bs[i]) * (v - bs[i])
	}
	return math.Sqrt(s)
}

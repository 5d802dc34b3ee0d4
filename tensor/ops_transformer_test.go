package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// The rows of TestOps for the ops GPT-2 and Llama add: the tanh GELU,
// SiLU, RMSNorm and rotary embeddings, each against its textbook formula
// in float64 (for GPT-2 and Llama as HF writes them).

func transformerCases() []opCase {
	var cases []opCase
	for _, a := range []struct {
		name          string
		f, slope      func(float64) float64
		fwd           func(*tensor.Tensor) *tensor.Tensor
		bwd           func(x, dy *tensor.Tensor) *tensor.Tensor
		cubic, nSteps float64
	}{
		// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))): its cubic term makes
		// the magnitudes involved |x| + 0.05·|x|⁴.
		{"GELUTanh", refGELUTanh, refGELUTanhSlope, tensor.GELUTanh, tensor.GELUTanhBackward, 0.05, 12},
		// x/(1 + e^(−x)).
		{"SiLU", refSiLU, refSiLUSlope, tensor.SiLU, tensor.SiLUBackward, 0, 8},
	} {
		// The kernels evaluate the formula in float64 (n steps, each off by
		// at most u of the magnitudes involved) and round once: within
		// bounded's γ_n of those magnitudes in any compute type.
		mags := func(x float64) float64 { return math.Abs(x) + a.cubic*math.Pow(x, 4) + 1 }
		n := int(a.nSteps)
		cases = append(cases,
			opCase{name: a.name, dtypes: each(1, floats...), inputs: scaledNormals(2.5, shape(5, 37)),
				kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor { return outputs(a.fwd(in[0])) },
				ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
					xs := in[0].Float64s()
					val, abs := make([]float64, len(xs)), make([]float64, len(xs))
					for i, x := range xs {
						val[i], abs[i] = a.f(x), mags(x)
					}
					return []expect{bounded(d[0], computeOf(d[0]), in[0].Shape(), val, abs, n)}
				}},
			opCase{name: a.name + "Backward", dtypes: runs(each(2, floats...), mixed), inputs: scaledNormals(2.5, shape(5, 37), shape(5, 37)),
				kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor { return outputs(a.bwd(in[0], in[1])) },
				ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
					xs, gs := in[0].Float64s(), in[1].Float64s()
					val, abs := make([]float64, len(xs)), make([]float64, len(xs))
					for i, x := range xs {
						val[i], abs[i] = gs[i]*a.slope(x), math.Abs(gs[i])*mags(x)*(1+math.Abs(x))
					}
					out := promoted(d...)
					return []expect{bounded(out, computeOf(out), in[0].Shape(), val, abs, n+4)}
				}})
	}
	for _, x := range [][]int{shape(4, 3, 8), shape(7, 13), split} {
		c := x[len(x)-1]
		cases = append(cases,
			opCase{name: fmt.Sprint("RMSNorm/", x), inputs: rmsNormInputs(x, false), ref: rmsNormRef,
				dtypes: runs(each(2, floats...), mixed),
				kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
					y, rstd := tensor.RMSNorm(in[0], in[1], lnEps)
					return outputs(y, rstd)
				}},
			opCase{name: fmt.Sprint("RMSNormBackward/", x), inputs: rmsNormInputs(x, true), ref: rmsNormBackwardRef(c),
				dtypes: runs(each(3, floats...), [][]dtype.DType{{dtype.BF16, dtype.F32, dtype.BF16}, {dtype.F64, dtype.BF16, dtype.BF16}}), // x, w, dy
				kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
					dx, dw := tensor.RMSNormBackward(in[0], in[1], in[2], in[3])
					return outputs(dx, dw)
				}})
	}
	for _, inverse := range []bool{false, true} {
		cases = append(cases, opCase{name: fmt.Sprintf("Rotary/inverse=%v", inverse), dtypes: each(1, floats...), inputs: normals(shape(2, 3, 7, 8)),
			kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				return outputs(tensor.Rotary(in[0], 500, inverse))
			},
			ref: rotaryRef(500, inverse)})
	}
	return cases
}

// scaledNormals is normals with standard deviation sigma.
func scaledNormals(sigma float64, shapes ...[]int) func(*rand.Rand, []dtype.DType) []*tensor.Tensor {
	return func(rng *rand.Rand, d []dtype.DType) []*tensor.Tensor {
		in := make([]*tensor.Tensor, len(shapes))
		for i, s := range shapes {
			in[i] = randn(rng, d[i], 0, sigma, s...)
		}
		return in
	}
}

func refGELUTanh(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

// refGELUTanhSlope differentiates refGELUTanh by the chain rule, tanh' = 1 − tanh².
func refGELUTanhSlope(x float64) float64 {
	inner := math.Sqrt(2/math.Pi) * (x + 0.044715*x*x*x)
	dInner := math.Sqrt(2/math.Pi) * (1 + 3*0.044715*x*x)
	t := math.Tanh(inner)
	return 0.5*(1+t) + 0.5*x*(1-t*t)*dInner
}

func refSiLU(x float64) float64 { return x / (1 + math.Exp(-x)) }

// refSiLUSlope is d/dx x·σ(x) = σ(x) + x·σ(x)·(1 − σ(x)).
func refSiLUSlope(x float64) float64 {
	s := 1 / (1 + math.Exp(-x))
	return s + x*s*(1-s)
}

// rmsNormInputs are x and w for the forward pass; for the backward, x, w,
// the rows' exact rstd in the compute type, and dy.
func rmsNormInputs(x []int, backward bool) func(*rand.Rand, []dtype.DType) []*tensor.Tensor {
	c := x[len(x)-1]
	return func(rng *rand.Rand, d []dtype.DType) []*tensor.Tensor {
		xt, w := randn(rng, d[0], 1, 1, x...), randn(rng, d[1], 0, 1, c)
		if !backward {
			return []*tensor.Tensor{xt, w}
		}
		rstd := rmsOf(xt.Float64s(), c)
		return []*tensor.Tensor{xt, w, tensor.FromFloat64(rstd, len(rstd)).To(computeOf(promoted(d...))), randn(rng, d[2], 0, 1, x...)}
	}
}

// rmsOf is 1/sqrt(mean(x²)+eps) of each row of c.
func rmsOf(xs []float64, c int) []float64 {
	var out []float64
	for r := 0; r < len(xs); r += c {
		var sq float64
		for _, v := range xs[r : r+c] {
			sq += v * v / float64(c)
		}
		out = append(out, 1/math.Sqrt(sq+lnEps))
	}
	return out
}

// rmsNormRef: y = x·r·w, r = 1/√(mean(x²)+eps). Σx² sums c positive terms
// (γ_{c+1} relative, with the division), r inherits half of that and γ₃
// of its own (float64 steps, rounding); the two products γ₂: γ_{c+6} of
// |y| in all, and γ_{c+4} of r.
func rmsNormRef(d []dtype.DType, in []*tensor.Tensor) []expect {
	out := promoted(d...)
	st := computeOf(out)
	c, xs, ws := in[0].Dim(-1), in[0].Float64s(), in[1].Float64s()
	rs := rmsOf(xs, c)
	y, abs := make([]float64, len(xs)), make([]float64, len(xs))
	for i, v := range xs {
		y[i] = v * rs[i/c] * ws[i%c]
		abs[i] = math.Abs(y[i])
	}
	return []expect{bounded(out, st, in[0].Shape(), y, abs, c+6), bounded(st, st, shape(len(rs)), rs, rs, c+4)}
}

// rmsNormBackwardRef: with x̂ = x·r from the given rstd,
// dx_j = r·(g_j·w_j − x̂_j·mean(g·w·x̂)), dw = Σ_rows g·x̂. The dot product
// of c terms carries γ_{c+3} of S = Σ|g·w·x̂|; the products and the
// difference γ₅ more: r·γ_{c+8}·(|g_j·w_j| + |x̂_j|·S/c). dw's terms carry
// γ₂ each and their sum over R rows γ_R.
func rmsNormBackwardRef(c int) func([]dtype.DType, []*tensor.Tensor) []expect {
	return func(d []dtype.DType, in []*tensor.Tensor) []expect {
		out := promoted(d...)
		ct := computeOf(out)
		uc := boundRoundoff(ct)
		xs, ws, rs, gs := in[0].Float64s(), in[1].Float64s(), in[2].Float64s(), in[3].Float64s()
		dx := expect{dt: out, compute: ct, shape: in[0].Shape(), val: make([]float64, len(xs)), bound: make([]float64, len(xs))}
		dwVal, dwAbs := make([]float64, c), make([]float64, c)
		for r := range rs {
			var mean, s float64
			for j := range c {
				i := r*c + j
				xhat := xs[i] * rs[r]
				mean += gs[i] * ws[j] * xhat / float64(c)
				s += math.Abs(gs[i] * ws[j] * xhat)
				dwVal[j] += gs[i] * xhat
				dwAbs[j] += math.Abs(gs[i] * xhat)
			}
			for j := range c {
				i := r*c + j
				xhat := xs[i] * rs[r]
				dx.val[i] = rs[r] * (gs[i]*ws[j] - xhat*mean)
				dx.bound[i] = rs[r] * gamma(c+8, uc) * (math.Abs(gs[i]*ws[j]) + math.Abs(xhat)*s/float64(c))
			}
		}
		return []expect{dx, bounded(d[1], ct, shape(c), dwVal, dwAbs, len(rs)+2)}
	}
}

// rotaryRef turns each (i, i+h) pair of the last axis at position t (the
// second-last axis) by t·theta^(−2i/hs), or back with inverse. The kernel
// rounds cos and sin to the compute type (u each, of |x_i| + |x_{i+h}|),
// after an angle of up to T·(a few float64 ulps); two products and a sum
// add γ₃: γ₄ of (|x_i| + |x_{i+h}|)·(1 + T) covers all of it.
func rotaryRef(theta float64, inverse bool) func([]dtype.DType, []*tensor.Tensor) []expect {
	return func(d []dtype.DType, in []*tensor.Tensor) []expect {
		t, hs := in[0].Dim(-2), in[0].Dim(-1)
		h := hs / 2
		xs := in[0].Float64s()
		val, abs := make([]float64, len(xs)), make([]float64, len(xs))
		for r := 0; r < len(xs); r += hs {
			p := r / hs % t
			for i := range h {
				angle := float64(p) / math.Pow(theta, float64(2*i)/float64(hs))
				if inverse {
					angle = -angle
				}
				a, b := xs[r+i], xs[r+i+h]
				val[r+i] = a*math.Cos(angle) - b*math.Sin(angle)
				val[r+i+h] = b*math.Cos(angle) + a*math.Sin(angle)
				abs[r+i] = (math.Abs(a) + math.Abs(b)) * float64(1+t)
				abs[r+i+h] = abs[r+i]
			}
		}
		return []expect{bounded(d[0], computeOf(d[0]), in[0].Shape(), val, abs, 4)}
	}
}

package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// The LayerNorm rows of TestOps. Inputs have mean 3 and σ 1, so that the
// mean's error and the cancellation in x−mean matter. Bounds follow each
// value through the kernel's roundings in the compute type (u as in
// ops_rows_test.go); the result's last rounding is expect's own.

const lnEps = 1e-5

func layerNormCases() []opCase {
	var cases []opCase
	for _, x := range [][]int{shape(4, 3, 8), shape(7, 13), split} {
		c := x[len(x)-1]
		name := fmt.Sprint(x)
		cases = append(cases,
			opCase{name: "LayerNorm/" + name, inputs: layerNormInputs(x, false), ref: layerNormRef,
				dtypes: runs(each(3, floats...), [][]dtype.DType{{dtype.BF16, dtype.F32, dtype.F32}, {dtype.F64, dtype.BF16, dtype.BF16}}),
				kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
					y, mean, rstd := tensor.LayerNorm(in[0], in[1], in[2], lnEps)
					return outputs(y, mean, rstd)
				}},
			opCase{name: "LayerNormBackward/" + name, inputs: layerNormInputs(x, true), ref: layerNormBackwardRef(c),
				dtypes: runs(each(3, floats...), [][]dtype.DType{{dtype.BF16, dtype.F32, dtype.BF16}, {dtype.F64, dtype.BF16, dtype.BF16}}), // x, w, dy
				kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
					dx, dw, db := tensor.LayerNormBackward(in[0], in[1], in[2], in[3], in[4])
					return outputs(dx, dw, db)
				}})
	}
	return cases
}

// layerNormInputs are x, w and b for the forward pass; for the backward,
// x, w, the rows' exact mean and rstd in the compute type, and dy.
func layerNormInputs(x []int, backward bool) func(*rand.Rand, []dtype.DType) []*tensor.Tensor {
	c := x[len(x)-1]
	return func(rng *rand.Rand, d []dtype.DType) []*tensor.Tensor {
		xt, w := randn(rng, d[0], 3, 1, x...), randn(rng, d[1], 0, 1, c)
		if !backward {
			return []*tensor.Tensor{xt, w, randn(rng, d[2], 0, 1, c)}
		}
		var mean, rstd []float64
		for _, st := range rowStats(xt.Float64s(), c) {
			mean, rstd = append(mean, st.mean), append(rstd, 1/math.Sqrt(st.variance+lnEps))
		}
		stats := computeOf(promoted(d...))
		rows := len(mean)
		return []*tensor.Tensor{xt, w, tensor.FromFloat64(mean, rows).To(stats), tensor.FromFloat64(rstd, rows).To(stats), randn(rng, d[2], 0, 1, x...)}
	}
}

// stats are one row's exact mean, biased variance and Σ|x|.
type stats struct{ mean, variance, absSum float64 }

func rowStats(xs []float64, c int) []stats {
	var out []stats
	for r := 0; r < len(xs); r += c {
		var s stats
		for _, v := range xs[r : r+c] {
			s.mean += v / float64(c)
			s.absSum += math.Abs(v)
		}
		for _, v := range xs[r : r+c] {
			s.variance += (v - s.mean) * (v - s.mean) / float64(c)
		}
		out = append(out, s)
	}
	return out
}

// layerNormRef: y = (x−μ)·r·w + b, r = 1/√(var+eps), per row of c.
//
//   - μ: c additions and a division: Eμ = γ_{c+1}·Σ|x|/c.
//   - x_j−μ̂ (d_j exact): D_j = Eμ(1+u) + u·|d_j|.
//   - var: each square is off by D_j(2|d_j|+D_j); their sum and the
//     division carry γ_{c+2} of Σ(|d_j|+D_j)², all over c.
//   - r: relatively Δvar/(var+eps) (twice the first-order ½, covering
//     the rest) and γ₃ for the division, float64 steps and rounding.
//   - y_j before its last rounding: |w_j|·((D_j·(r+Δr) + |d_j|·Δr)·(1+γ₂)
//   - γ₂·|d_j|·r), the two products' roundings.
func layerNormRef(d []dtype.DType, in []*tensor.Tensor) []expect {
	out := promoted(d...)
	st := computeOf(out)
	uc := boundRoundoff(st)
	c, xs, ws, bs := in[0].Dim(-1), in[0].Float64s(), in[1].Float64s(), in[2].Float64s()
	rows := len(xs) / c
	y := expect{dt: out, compute: st, shape: in[0].Shape(), val: make([]float64, len(xs)), bound: make([]float64, len(xs))}
	mean := expect{dt: st, compute: st, shape: shape(rows), val: make([]float64, rows), bound: make([]float64, rows)}
	rstd := expect{dt: st, compute: st, shape: shape(rows), val: make([]float64, rows), bound: make([]float64, rows)}
	for r, s := range rowStats(xs, c) {
		row := xs[r*c : (r+1)*c]
		eMu := gamma(c+1, uc) * s.absSum / float64(c)
		var dVar float64
		for _, v := range row {
			dev := math.Abs(v - s.mean)
			dj := eMu*(1+uc) + uc*dev
			dVar += (dj*(2*dev+dj) + gamma(c+2, uc)*(dev+dj)*(dev+dj)) / float64(c)
		}
		rs := 1 / math.Sqrt(s.variance+lnEps)
		dRs := rs * (dVar/(s.variance+lnEps) + gamma(3, uc))
		mean.val[r], mean.bound[r] = s.mean, eMu
		rstd.val[r], rstd.bound[r] = rs, dRs
		for j, v := range row {
			dev := math.Abs(v - s.mean)
			dj := eMu*(1+uc) + uc*dev
			y.val[r*c+j] = (v-s.mean)*rs*ws[j] + bs[j]
			y.bound[r*c+j] = math.Abs(ws[j]) * ((dj*(rs+dRs)+dev*dRs)*(1+gamma(2, uc)) + gamma(2, uc)*dev*rs)
		}
	}
	return []expect{y, mean, rstd}
}

// layerNormBackwardRef: with x̂ = (x−m)·r from the given mean and rstd,
//
//	dx_j = r·(g_j·w_j − mean(g·w) − x̂_j·mean(g·w·x̂)),
//	dw = Σ_rows g·x̂, db = Σ_rows g.
//
// x̂ carries γ₂; the means γ_{c+1} of S1 = Σ|g·w| and γ_{c+4} of
// S2 = Σ|g·w·x̂| (over c); the product and two differences three more:
// r·γ_{c+8}·(|g_j·w_j| + S1/c + 2|x̂_j|·S2/c) before dx's last rounding
// (3 instead of 2 covers the cross terms). dw's terms carry γ₃ each and
// their sum over R rows γ_R: γ_{R+3}·Σ|g·x̂|; db γ_R·Σ|g|. dw and db have
// w's dtype, computed in dx's compute type.
func layerNormBackwardRef(c int) func([]dtype.DType, []*tensor.Tensor) []expect {
	return func(d []dtype.DType, in []*tensor.Tensor) []expect {
		out := promoted(d...)
		ct := computeOf(out)
		uc := boundRoundoff(ct)
		xs, ws, ms, rs, gs := in[0].Float64s(), in[1].Float64s(), in[2].Float64s(), in[3].Float64s(), in[4].Float64s()
		rows := len(ms)
		dx := expect{dt: out, compute: ct, shape: in[0].Shape(), val: make([]float64, len(xs)), bound: make([]float64, len(xs))}
		dwVal, dwAbs, dbVal, dbAbs := make([]float64, c), make([]float64, c), make([]float64, c), make([]float64, c)
		xhat := make([]float64, c)
		for r := range rows {
			var meanD, meanDX, s1, s2 float64
			for j := range c {
				i := r*c + j
				xhat[j] = (xs[i] - ms[r]) * rs[r]
				gw := gs[i] * ws[j]
				meanD += gw / float64(c)
				meanDX += gw * xhat[j] / float64(c)
				s1 += math.Abs(gw)
				s2 += math.Abs(gw * xhat[j])
				dwVal[j] += gs[i] * xhat[j]
				dwAbs[j] += math.Abs(gs[i] * xhat[j])
				dbVal[j] += gs[i]
				dbAbs[j] += math.Abs(gs[i])
			}
			for j := range c {
				i := r*c + j
				dx.val[i] = rs[r] * (gs[i]*ws[j] - meanD - xhat[j]*meanDX)
				dx.bound[i] = rs[r] * gamma(c+8, uc) * (math.Abs(gs[i]*ws[j]) + s1/float64(c) + 3*math.Abs(xhat[j])*s2/float64(c))
			}
		}
		return []expect{dx, bounded(d[1], ct, shape(c), dwVal, dwAbs, rows+3), bounded(d[1], ct, shape(c), dbVal, dbAbs, rows)}
	}
}

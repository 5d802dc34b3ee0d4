package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// The row-wise rows of TestOps: softmax, its backward, and cross-entropy.
// Bounds count the roundings on each value's path in the compute type
// (u is boundRoundoff of the compute type, see reference_test.go):
// exp and log are evaluated in float64 and rounded to float32 (1 rounding;
// 2 for Go's float64 functions, within 1 ulp), and a shift x−max rounded by
// u·|x−max| moves exp(x−max) relatively by e^{u·|x−max|}−1 ≤ γ_⌈|x−max|⌉.

// rowCases are Softmax and SoftmaxBackward over rows of several lengths:
// with -inf entries, of one element, odd, and split across cores.
func rowCases() []opCase {
	var cases []opCase
	for _, s := range [][]int{shape(4, 6), shape(3, 1), shape(5, 33), split} {
		name := fmt.Sprint(s)
		cases = append(cases,
			opCase{name: "Softmax/" + name, dtypes: each(1, floats...), inputs: softmaxInputs(s), ref: softmaxRef,
				kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor { return outputs(tensor.Softmax(in[0])) }},
			opCase{name: "SoftmaxBackward/" + name, dtypes: runs(each(2, floats...), mixed), inputs: softmaxBackwardInputs(s),
				kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
					return outputs(tensor.SoftmaxBackward(in[0], in[1]))
				},
				ref: softmaxBackwardRef})
	}
	for _, nc := range [][2]int{{1, 7}, {5, 7}, {16, 7}, {40, 7}, {400, 7}, {20, 33}} {
		cases = append(cases, crossEntropyCases(nc[0], nc[1])...)
	}
	return cases
}

// softmaxInputs are normal values (σ = 2); the first shape gets -inf
// entries (masked positions), no row all -inf.
func softmaxInputs(s []int) func(*rand.Rand, []dtype.DType) []*tensor.Tensor {
	return func(rng *rand.Rand, d []dtype.DType) []*tensor.Tensor {
		vals := randn(rng, dtype.F64, 0, 2, s...).Float64s()
		if s[1] == 6 {
			for _, i := range []int{1, 11, 12, 13, 14} {
				vals[i] = math.Inf(-1)
			}
		}
		return []*tensor.Tensor{tensor.FromFloat64(vals, s...).To(d[0])}
	}
}

// softmax returns the exact softmax of each row of c elements.
func softmax(xs []float64, c int) []float64 {
	ys := make([]float64, len(xs))
	for r := 0; r < len(xs); r += c {
		mx := math.Inf(-1)
		for _, v := range xs[r : r+c] {
			mx = max(mx, v)
		}
		var sum float64
		for j, v := range xs[r : r+c] {
			ys[r+j] = math.Exp(v - mx)
			sum += ys[r+j]
		}
		for j := range c {
			ys[r+j] /= sum
		}
	}
	return ys
}

// softmaxRef: y_j = exp(x_j−max)/Σ exp(x_i−max). Element j's exp carries
// γ_{⌈|x_j−max|⌉+2}, the sum of positive terms γ_{c−1} and the largest of
// its terms' errors (shift M = max ⌈|x_i−max|⌉), the division one more:
// γ_{c+5+⌈|x_j−max|⌉+M}·y_j. exp(-inf) is exactly 0.
func softmaxRef(d []dtype.DType, in []*tensor.Tensor) []expect {
	c, xs := in[0].Dim(-1), in[0].Float64s()
	e := expect{dt: d[0], compute: computeOf(d[0]), shape: in[0].Shape(), val: softmax(xs, c), bound: make([]float64, len(xs))}
	for r := 0; r < len(xs); r += c {
		mx := math.Inf(-1)
		for _, v := range xs[r : r+c] {
			mx = max(mx, v)
		}
		shifts, worst := make([]int, c), 0
		for j, v := range xs[r : r+c] {
			if !math.IsInf(v, -1) {
				shifts[j] = int(math.Ceil(mx - v))
				worst = max(worst, shifts[j])
			}
		}
		for j := range c {
			e.bound[r+j] = gamma(c+5+shifts[j]+worst, boundRoundoff(e.compute)) * e.val[r+j]
		}
	}
	return []expect{e}
}

// softmaxBackwardInputs are y, softmax rows of normal values rounded to
// the first dtype, and dy.
func softmaxBackwardInputs(s []int) func(*rand.Rand, []dtype.DType) []*tensor.Tensor {
	return func(rng *rand.Rand, d []dtype.DType) []*tensor.Tensor {
		y := softmax(randn(rng, dtype.F64, 0, 2, s...).Float64s(), s[1])
		return []*tensor.Tensor{tensor.FromFloat64(y, s...).To(d[0]), randn(rng, d[1], 0, 1, s...)}
	}
}

// softmaxBackwardRef: dx_j = y_j·(dy_j − Σ dy·y). The dot product carries
// γ_c·Σ|dy·y|; the difference and the product two roundings:
// γ_{c+2}·|y_j|·(Σ|dy·y| + |dy_j| + |Σ dy·y|).
func softmaxBackwardRef(d []dtype.DType, in []*tensor.Tensor) []expect {
	c, ys, gs := in[0].Dim(-1), in[0].Float64s(), in[1].Float64s()
	out := promoted(d...)
	e := expect{dt: out, compute: computeOf(out), shape: in[0].Shape(), val: make([]float64, len(ys)), bound: make([]float64, len(ys))}
	for r := 0; r < len(ys); r += c {
		var dot, dotAbs float64
		for j := r; j < r+c; j++ {
			dot += gs[j] * ys[j]
			dotAbs += math.Abs(gs[j] * ys[j])
		}
		for j := r; j < r+c; j++ {
			e.val[j] = ys[j] * (gs[j] - dot)
			e.bound[j] = gamma(c+2, boundRoundoff(e.compute)) * math.Abs(ys[j]) * (dotAbs + math.Abs(gs[j]) + math.Abs(dot))
		}
	}
	return []expect{e}
}

// logSumExp returns a row's max and log Σ exp(z−max), exactly, and the
// bound on the kernel's value: the sum of c positive terms, each off by
// its shift's and exp's errors, carries γ_{c+2+M} relatively (M the
// largest ⌈|z−max|⌉), which the log turns into that much absolutely; the
// log rounds (2 roundings).
func logSumExp(row []float64, compute dtype.DType) (mx, lse, bound float64) {
	mx = math.Inf(-1)
	for _, v := range row {
		mx = max(mx, v)
	}
	var sum float64
	worst := 0
	for _, v := range row {
		sum += math.Exp(v - mx)
		worst = max(worst, int(math.Ceil(mx-v)))
	}
	lse = math.Log(sum)
	return mx, lse, gamma(len(row)+2+worst, boundRoundoff(compute)) + gamma(2, boundRoundoff(compute))*math.Abs(lse)
}

// crossEntropyCases are CrossEntropy and its backward for n rows of c
// logits (σ = 2), against fixed targets, with dloss 0.3 (not a power of
// two, so that its rounding and the scale's show).
func crossEntropyCases(n, c int) []opCase {
	targets, trng := make([]int, n), rand.New(rand.NewPCG(uint64(n), uint64(c)))
	for i := range targets {
		targets[i] = trng.IntN(c)
	}
	inputs := func(rng *rand.Rand, d []dtype.DType) []*tensor.Tensor {
		return []*tensor.Tensor{randn(rng, d[0], 0, 2, n, c), tensor.Scalar(d[0], 0.3)}
	}
	name := fmt.Sprintf("%dx%d", n, c)
	return []opCase{
		{name: "CrossEntropy/" + name, dtypes: each(1, floats...), inputs: inputs,
			kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				loss, err := tensor.CrossEntropy(in[0], targets)
				if err != nil {
					panic(err)
				}
				return outputs(loss)
			},
			ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
				// Row loss ℓ = lse − (z_t − max): the shift (u·|z_t−max|),
				// lse's bound, the difference (u·|ℓ|); then the mean of n
				// terms, summed in strided partials and a halving tree of
				// at most 1024 (≤ n+10 additions each), and a division.
				compute, zs := computeOf(d[0]), in[0].Float64s()
				var loss, abs, rowErr float64
				for i, t := range targets {
					row := zs[i*c : (i+1)*c]
					mx, lse, b := logSumExp(row, compute)
					l := lse - (row[t] - mx)
					loss += l / float64(n)
					abs += math.Abs(l)
					rowErr += boundRoundoff(compute)*(math.Abs(row[t]-mx)+math.Abs(l)) + b
				}
				bound := (rowErr + gamma(n+11, boundRoundoff(compute))*abs) / float64(n) * (1 + gamma(1, boundRoundoff(compute)))
				return []expect{{dt: d[0], compute: compute, shape: shape(), val: []float64{loss}, bound: []float64{bound}}}
			}},
		{name: "CrossEntropyBackward/" + name, dtypes: each(1, floats...), inputs: inputs,
			kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				return outputs(tensor.CrossEntropyBackward(in[0], targets, in[1]))
			},
			ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
				// dz_j = (p_j − [j = t])·dloss/n with p_j = exp(z_j − max −
				// lse). The exponent carries the shift's, lse's and the
				// difference's errors, exp and the rounded scale and
				// product 4 roundings; the target's subtraction adds the
				// scale's error.
				compute, zs, dl := computeOf(d[0]), in[0].Float64s(), in[1].Float64s()[0]
				s, uc := dl/float64(n), boundRoundoff(compute)
				e := expect{dt: d[0], compute: compute, shape: in[0].Shape(), val: make([]float64, n*c), bound: make([]float64, n*c)}
				for i, t := range targets {
					row := zs[i*c : (i+1)*c]
					mx, lse, b := logSumExp(row, compute)
					for j, z := range row {
						p := math.Exp(z - mx - lse)
						argErr := uc*(math.Abs(z-mx)+math.Abs(z-mx-lse)) + b
						e.val[i*c+j] = p * s
						e.bound[i*c+j] = math.Abs(p*s) * ((1+math.Expm1(argErr))*(1+gamma(4, uc)) - 1)
					}
					e.val[i*c+t] -= s
					e.bound[i*c+t] += gamma(2, uc) * math.Abs(s)
				}
				return []expect{e}
			}},
	}
}

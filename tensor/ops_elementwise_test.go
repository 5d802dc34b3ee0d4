package tensor_test

import (
	"math"
	"math/rand/v2"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// The elementwise rows of TestOps: one rounded operation per element
// (exact: the reference is the float64 value, rounded as the kernel's last
// step rounds), GELU's float32 formula, broadcasting and its reduction.

// split is a shape large enough (150,000 elements) for the kernels'
// multi-core paths on two or more cores (parallelMin is 2^16 per core):
// rows split across cores, and low-precision results are encoded in parts.
var split = shape(3, 50000)

func elementwiseCases() []opCase {
	cases := []opCase{
		{name: "Scale", dtypes: each(1, withFP8...), inputs: normals(shape(3, 5, 7)), kernel: scaleKernel, ref: scaleRef},
		{name: "Scale/split", dtypes: each(1, floats...), inputs: normals(split), kernel: scaleKernel, ref: scaleRef},
		{name: "Mul", dtypes: runs(each(2, floats...), mixed), inputs: normals(shape(4, 9), shape(4, 9)),
			kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor { return outputs(tensor.Mul(in[0], in[1])) },
			ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
				a, b := in[0].Float64s(), in[1].Float64s()
				val := make([]float64, len(a))
				for i := range a {
					val[i] = a[i] * b[i] // exact for float32 inputs; the kernel's own product for float64
				}
				return []expect{exact(promoted(d...), in[0].Shape(), val)}
			}},
		{name: "ReLU", dtypes: each(1, floats...), inputs: normals(shape(5, 37)),
			kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor { return outputs(tensor.ReLU(in[0])) },
			ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
				val := in[0].Float64s()
				for i, v := range val {
					if !(v > 0) {
						val[i] = 0
					}
				}
				return []expect{exact(d[0], in[0].Shape(), val)}
			}},
		{name: "ReLUBackward", dtypes: runs(each(2, floats...), mixed), inputs: normals(shape(5, 37), shape(5, 37)),
			kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				return outputs(tensor.ReLUBackward(in[0], in[1]))
			},
			ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
				y, val := in[0].Float64s(), in[1].Float64s()
				for i, v := range y {
					if !(v > 0) {
						val[i] = 0
					}
				}
				return []expect{exact(promoted(d...), in[0].Shape(), val)}
			}},
		{name: "GELU", dtypes: each(1, floats...), inputs: geluInputs, kernel: geluKernel, ref: geluRef},
		{name: "GELUBackward", dtypes: runs(each(2, floats...), mixed), inputs: geluInputs, ref: geluBackwardRef,
			kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				return outputs(tensor.GELUBackward(in[0], in[1]))
			}},
		causalMaskCase("CausalMask/-inf", math.Inf(-1), 2, 3, 4, 4),
		causalMaskCase("CausalMask/wide", -1e5, 3, 5, 7), // -1e5 overflows f16 to -inf
	}
	for _, b := range []struct {
		name string
		a, b []int
		from int
	}{
		{"Add", shape(4, 9), shape(4, 9), 0},
		{"AddBroadcast/features", shape(4, 7), shape(7), 1},
		{"AddBroadcast/channels", shape(2, 3, 5, 5), shape(3), 1},
		{"AddBroadcast/middle", shape(2, 3, 4, 5), shape(3, 4), 1},
		{"AddBroadcast/leading", shape(3, 4, 2), shape(3), 0},
	} {
		cases = append(cases, broadcastCases(b.name, b.a, b.b, b.from)...)
	}
	return cases
}

// promoted is the dtype of an op over inputs of dtypes d (PyTorch's rule):
// the dtype itself if all agree, f64 if one is f64, otherwise f32.
func promoted(d ...dtype.DType) dtype.DType {
	out := d[0]
	for _, dt := range d[1:] {
		switch {
		case dt == out:
		case dt == dtype.F64 || out == dtype.F64:
			out = dtype.F64
		default:
			out = dtype.F32
		}
	}
	return out
}

const scaleBy = -0.7 // not a float32: the scalar's conversion shows

func scaleKernel(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
	return outputs(tensor.Scale(in[0], scaleBy))
}

func scaleRef(d []dtype.DType, in []*tensor.Tensor) []expect {
	s, val := computeScalar(d[0], scaleBy), in[0].Float64s()
	for i := range val {
		val[i] *= s
	}
	return []expect{exact(d[0], in[0].Shape(), val)}
}

// twoSum returns a+b in float64 and that sum's rounding error (Knuth): a
// sum of two float32 values is exact in float64 unless their exponents
// are far apart, and then the error bounds the value the kernel rounds.
func twoSum(a, b float64) (s, err float64) {
	s = a + b
	bb := s - a
	return s, (a - (s - bb)) + (b - bb)
}

// broadcastCases are AddBroadcast of a and b at from, and ReduceBroadcast
// (its gradient for b) of a gradient shaped like a.
func broadcastCases(name string, a, b []int, from int) []opCase {
	return []opCase{
		{name: name, dtypes: runs(each(2, floats...), mixed), inputs: normals(a, b),
			kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				return outputs(tensor.AddBroadcast(in[0], in[1], from))
			},
			ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
				xs, bs, inner := in[0].Float64s(), in[1].Float64s(), Numel(a[from+len(b):])
				out := promoted(d...)
				e := expect{dt: out, compute: computeOf(out), shape: a, val: make([]float64, len(xs)), bound: make([]float64, len(xs))}
				for i, x := range xs {
					s, err := twoSum(x, bs[i/inner%len(bs)])
					e.val[i], e.bound[i] = s, math.Abs(err)
				}
				return []expect{e}
			}},
		{name: "ReduceBroadcast/" + name, inputs: normals(a),
			// The run's second dtype is the gradient's.
			dtypes: runs(each(2, floats...), [][]dtype.DType{{dtype.BF16, dtype.F32}, {dtype.F64, dtype.BF16}, {dtype.F64, dtype.F32}, {dtype.BF16, dtype.F64}, {dtype.F16, dtype.F32}}),
			kernel: func(d []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				return outputs(tensor.ReduceBroadcast(in[0], b, from, d[1]))
			},
			ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
				gs, mid, inner := in[0].Float64s(), Numel(b), Numel(a[from+len(b):])
				val, abs := make([]float64, mid), make([]float64, mid)
				for i, g := range gs {
					val[i/inner%mid] += g
					abs[i/inner%mid] += math.Abs(g)
				}
				// Summed in float64 if either side is F64.
				return []expect{bounded(d[1], computeOf(promoted(d...)), b, val, abs, len(gs)/mid)}
			}},
	}
}

// geluInputs are x (σ = 2.5, reaching erf's tail beyond |x| = 2√2) and
// dy.
func geluInputs(rng *rand.Rand, d []dtype.DType) []*tensor.Tensor {
	in := []*tensor.Tensor{randn(rng, d[0], 0, 2.5, 5, 37)}
	if len(d) > 1 {
		in = append(in, randn(rng, d[1], 0, 1, 5, 37))
	}
	return in
}

func geluKernel(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
	return outputs(tensor.GELU(in[0]))
}

// geluRef bounds GELU's formula c = 0.5·(1 + erf(x·√½)), y = x·c in the
// compute type (unit roundoff u, plus float64's for the reference): the
// rounded √½ and product move erf's argument by γ₂·|x|/√2, which erf
// (slope ≤ 2/√π) turns into ≤ 0.8·γ₂·|x|; erf itself is within 1 ulp of
// the correctly rounded value (≤ 3u, see vec.erf32; Go's math.Erf for
// F64); 1+erf rounds once more (≤ 2u). Halved: |Δc| ≤ γ₅·(1+|x|), and y
// inherits |x|·|Δc| (its own rounding is the final one).
func geluRef(d []dtype.DType, in []*tensor.Tensor) []expect {
	dt, c := d[0], computeOf(d[0])
	u := boundRoundoff(c)
	y := expect{dt: dt, compute: c, shape: in[0].Shape()}
	for _, v := range in[0].Float64s() {
		y.val = append(y.val, v*0.5*(1+math.Erf(v/math.Sqrt2)))
		y.bound = append(y.bound, math.Abs(v)*phiBound(v, u))
	}
	return []expect{y}
}

// phiBound is geluRef's bound on the error of the kernels' Φ(v).
func phiBound(v, u float64) float64 { return gamma(5, u) * (1 + math.Abs(v)) }

// geluBackwardRef is dy·(Φ + x·φ(x)), Φ computed as GELU computes it (in
// x's compute type, within phiBound). The kernel squares x (one rounding:
// φ's exponent -x²/2 moves by u·x²/2, and so φ relatively by about that),
// evaluates exp within 1 ulp (3u), multiplies by a rounded 1/√(2π) and by
// x (3 roundings), adds Φ and multiplies by dy (2 more): γ_{8+⌈x²/2⌉} of
// |dy·x·φ| and of |dx|, and |dy| times Φ's error.
func geluBackwardRef(d []dtype.DType, in []*tensor.Tensor) []expect {
	out := promoted(d...)
	u, uPhi := boundRoundoff(computeOf(out)), boundRoundoff(computeOf(d[0]))
	xs, gs := in[0].Float64s(), in[1].Float64s()
	e := expect{dt: out, compute: computeOf(out), shape: in[0].Shape()}
	for i, x := range xs {
		pdf := math.Exp(-x*x/2) / math.Sqrt(2*math.Pi)
		v := gs[i] * (0.5*(1+math.Erf(x/math.Sqrt2)) + x*pdf)
		e.val = append(e.val, v)
		e.bound = append(e.bound, gamma(8+int(math.Ceil(x*x/2)), u)*(math.Abs(gs[i]*x*pdf)+math.Abs(v))+math.Abs(gs[i])*phiBound(x, uPhi))
	}
	return []expect{e}
}

// causalMaskCase sets the entries above the diagonal of the last two axes
// to fill, which is rounded to the dtype like any result.
func causalMaskCase(name string, fill float64, dims ...int) opCase {
	return opCase{name: name, dtypes: each(1, floats...), inputs: normals(dims),
		kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
			return outputs(tensor.CausalMask(in[0], fill))
		},
		ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
			rows, cols := dims[len(dims)-2], dims[len(dims)-1]
			val := in[0].Float64s()
			for k := range val {
				if i, j := k/cols%rows, k%cols; j > i {
					val[k] = fill
				}
			}
			return []expect{exact(d[0], dims, val)}
		}}
}

package tensor_test

import (
	"math"
	"math/rand/v2"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// The cast rows of TestOps: To and ToSat between every pair of float
// dtypes, FP8 quantization with a scale, and the reductions FP8 scaling
// and clipping read (AbsMax, Norm).

func castCases() []opCase {
	var pairs, toFP8, fromFP8 [][]dtype.DType
	for _, src := range withFP8 {
		for _, dst := range withFP8 {
			pairs = append(pairs, []dtype.DType{src, dst})
		}
	}
	for _, src := range floats {
		toFP8 = append(toFP8, []dtype.DType{src, dtype.E4M3FN}, []dtype.DType{src, dtype.E5M2})
		fromFP8 = append(fromFP8, []dtype.DType{dtype.E4M3FN, src}, []dtype.DType{dtype.E5M2, src})
	}
	const quantScale = 300 // N(0,1)·300 saturates both FP8 formats in the tails
	withNaN := func(rng *rand.Rand, d []dtype.DType) []*tensor.Tensor {
		vals := randn(rng, dtype.F64, 0, 1, 5, 7).Float64s()
		vals[17] = math.NaN()
		return []*tensor.Tensor{tensor.FromFloat64(vals, 5, 7).To(d[0])}
	}
	return []opCase{
		{name: "To", dtypes: pairs, inputs: castInputs, kernel: castKernel(false), ref: castRef(false)},
		{name: "ToSat", dtypes: pairs, inputs: castInputs, kernel: castKernel(true), ref: castRef(true)},
		{name: "To/split", inputs: normals(split), kernel: castKernel(false), ref: castRef(false),
			dtypes: [][]dtype.DType{{dtype.F32, dtype.BF16}, {dtype.F32, dtype.E4M3FN}, {dtype.F64, dtype.F16}, {dtype.BF16, dtype.F32}}},
		{name: "CopyFrom", dtypes: pairs, inputs: castInputs, ref: castRef(false),
			kernel: func(d []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				t := tensor.New(d[1], in[0].Shape()...)
				t.CopyFrom(in[0])
				return outputs(t)
			}},
		{name: "Fill", dtypes: each(1, withFP8...), inputs: normals(shape(3, 7)),
			kernel: func(d []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				t := tensor.New(d[0], 3, 7)
				t.Fill(fillValue)
				return outputs(t)
			},
			ref: func(d []dtype.DType, _ []*tensor.Tensor) []expect {
				val := make([]float64, 21)
				for i := range val {
					val[i] = fillValue
				}
				return []expect{exact(d[0], shape(3, 7), val)}
			}},
		{name: "HasNonFinite", dtypes: each(1, withFP8...), inputs: castInputs, kernel: nonFiniteKernel, ref: nonFiniteRef},
		{name: "HasNonFinite/finite", dtypes: each(1, withFP8...), inputs: normals(shape(5, 7)), kernel: nonFiniteKernel, ref: nonFiniteRef},
		{name: "ScaleTo", dtypes: toFP8, inputs: normals(shape(6, 7)),
			kernel: func(d []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				return outputs(tensor.ScaleTo(in[0], quantScale, d[1]))
			},
			ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
				// The product is taken in float32, of the input as float32.
				val := in[0].Float64s()
				for i, v := range val {
					val[i] = float64(float32(v)) * quantScale
				}
				return []expect{{dt: d[1], compute: dtype.F32, shape: in[0].Shape(), val: val, sat: true}}
			}},
		{name: "UnscaleTo", dtypes: fromFP8, inputs: normals(shape(6, 7)),
			kernel: func(d []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				return outputs(tensor.UnscaleTo(in[0], quantScale, d[1]))
			},
			ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
				// The quotient is taken in float32, of the FP8 value.
				val := in[0].Float64s()
				for i, v := range val {
					val[i] = float64(float32(v) / quantScale)
				}
				return []expect{{dt: d[1], compute: dtype.F32, shape: in[0].Shape(), val: val}}
			}},
		{name: "AbsMax", dtypes: each(1, withFP8...), inputs: normals(shape(5, 7)), kernel: absMaxKernel, ref: absMaxRef},
		{name: "AbsMax/NaN", dtypes: each(1, withFP8...), inputs: withNaN, kernel: absMaxKernel, ref: absMaxRef},
		{name: "Norm", dtypes: each(1, withFP8...), inputs: normals(shape(5, 37)),
			kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				return outputs(tensor.FromFloat64([]float64{in[0].Norm()}, 1))
			},
			ref: func(_ []dtype.DType, in []*tensor.Tensor) []expect {
				var sq float64
				for _, v := range in[0].Float64s() {
					sq += v * v
				}
				// Σv² of n positive terms in float64 (γ_n relative), its
				// square root halving that and rounding once more.
				norm := []float64{math.Sqrt(sq)}
				return []expect{bounded(dtype.F64, dtype.F64, shape(1), norm, norm, in[0].Len()+3)}
			}},
	}
}

// castInputs are values of the run's first dtype across and beyond every
// format's range: normal values scaled by 2^-30 … 2^20 (subnormals of the
// 16-bit formats, FP8 overflow), the midpoints around FP8's largest
// values, values that round differently from float64 directly and through
// float32, and the specials.
func castInputs(rng *rand.Rand, d []dtype.DType) []*tensor.Tensor {
	vals := []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(),
		448, 464, 465, 480, -500, 57344, 61440, 61441, 65504, 65520, -1e6, 1e-7, 3e-39}
	for _, p := range []int{3, 4, 8, 11} { // just above a tie of e5m2, e4m3, bf16, f16: float32 rounds onto it first
		vals = append(vals, 1+math.Ldexp(1, -p)+0x1p-40, -3*(1+math.Ldexp(1, -p)+0x1p-40))
	}
	for range 300 {
		vals = append(vals, rng.NormFloat64()*math.Ldexp(1, rng.IntN(51)-30))
	}
	return []*tensor.Tensor{tensor.FromFloat64(vals, len(vals)).To(d[0])}
}

func castKernel(sat bool) func([]dtype.DType, []*tensor.Tensor) []*tensor.Tensor {
	return func(d []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
		if sat {
			return outputs(in[0].ToSat(d[1]))
		}
		return outputs(in[0].To(d[1]))
	}
}

// castRef rounds each value to the target dtype; from F64 through float32
// first, as PyTorch casts double. A cast to the dtype a tensor already has
// returns it unchanged (for ToSat too: infinities stay).
func castRef(sat bool) func([]dtype.DType, []*tensor.Tensor) []expect {
	return func(d []dtype.DType, in []*tensor.Tensor) []expect {
		e := expect{dt: d[1], compute: computeOf(d[0]), shape: in[0].Shape(), val: in[0].Float64s(), sat: sat}
		if d[0] == d[1] {
			e.sat = false // values of the dtype round to themselves
		}
		return []expect{e}
	}
}

func absMaxKernel(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
	return outputs(tensor.FromFloat32([]float32{in[0].AbsMax()}, 1))
}

// absMaxRef is the largest |v| of the values as float32 (NaN if one is
// NaN), exact.
func absMaxRef(_ []dtype.DType, in []*tensor.Tensor) []expect {
	var m float64
	for _, v := range in[0].Float64s() {
		if math.IsNaN(v) {
			m = v
			break
		}
		m = max(m, math.Abs(float64(float32(v))))
	}
	return []expect{exact(dtype.F32, shape(1), []float64{m})}
}

const fillValue = 0.3 // rounded by every dtype

// nonFiniteKernel reports HasNonFinite as a one-element tensor (1 for true).
func nonFiniteKernel(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
	var found float32
	if in[0].HasNonFinite() {
		found = 1
	}
	return outputs(tensor.FromFloat32([]float32{found}, 1))
}

func nonFiniteRef(_ []dtype.DType, in []*tensor.Tensor) []expect {
	var found float64
	for _, v := range in[0].Float64s() {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			found = 1
		}
	}
	return []expect{exact(dtype.F32, shape(1), []float64{found})}
}

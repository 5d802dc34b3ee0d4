package tensor_test

import (
	"math"
	"math/rand/v2"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// The in-place rows of TestOps (optimizer updates, gradient accumulation
// and unscaling). Kernels run on clones, so that the inputs stay as the
// reference read them.

const sgdLR = 0.037

func updateOpCases() []opCase {
	cases := []opCase{
		{name: "SGDStep", dtypes: each(2, floats...), inputs: normals(shape(7, 9), shape(7, 9)),
			kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				p := in[0].Clone()
				tensor.SGDStep(p, in[1], sgdLR)
				return outputs(p)
			},
			ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
				// p + (-lr)·g: the product rounds before the sum, whose
				// rounding is the result's.
				ps, gs, lr := in[0].Float64s(), in[1].Float64s(), computeScalar(d[0], -sgdLR)
				e := expect{dt: d[0], compute: computeOf(d[0]), shape: in[0].Shape()}
				for i, p := range ps {
					e.val = append(e.val, p+lr*gs[i])
					e.bound = append(e.bound, boundRoundoff(e.compute)*math.Abs(lr*gs[i]))
				}
				return []expect{e}
			}},
		{name: "ScaleInPlace", dtypes: each(1, floats...), inputs: normals(shape(7, 9)), ref: scaleRef,
			kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				p := in[0].Clone()
				p.ScaleInPlace(scaleBy)
				return outputs(p)
			}},
		{name: "AddInPlace", inputs: normals(shape(7, 9), shape(7, 9)),
			dtypes: runs(each(2, floats...), [][]dtype.DType{{dtype.BF16, dtype.F32}, {dtype.F32, dtype.F64}, {dtype.F16, dtype.BF16}, {dtype.BF16, dtype.F64}}),
			kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				t := in[0].Clone()
				t.AddInPlace(in[1])
				return outputs(t)
			},
			ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
				// The sum in the promoted compute type, rounded once to t's dtype.
				a, b := in[0].Float64s(), in[1].Float64s()
				e := expect{dt: d[0], compute: computeOf(promoted(d...)), shape: in[0].Shape()}
				for i := range a {
					s, err := twoSum(a[i], b[i])
					e.val, e.bound = append(e.val, s), append(e.bound, math.Abs(err))
				}
				return []expect{e}
			}},
	}
	for _, n := range []struct {
		name string
		n    int
	}{{"AdamWStep", 257}, {"AdamWStep/split", 1<<17 + 5}} {
		cases = append(cases, opCase{name: n.name, dtypes: each(1, floats...), inputs: adamWInputs(n.n), ref: adamWOpRef,
			kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
				p, m, v := in[0].Clone(), in[2].Clone(), in[3].Clone()
				tensor.AdamWStep(p, in[1], m, v, adamWScalars(3))
				return outputs(p, m, v)
			}})
	}
	return cases
}

// adamWInputs are p, g, m and v (positive) of n elements.
func adamWInputs(n int) func(*rand.Rand, []dtype.DType) []*tensor.Tensor {
	return func(rng *rand.Rand, d []dtype.DType) []*tensor.Tensor {
		p, _, _ := state(rng, d[0], n, false)
		g, _, _ := state(rng, d[0], n, false)
		m, _, _ := state(rng, d[0], n, false)
		v, _, _ := state(rng, d[0], n, true)
		return []*tensor.Tensor{p, g, m, v}
	}
}

// adamWOpRef runs adamWRef, the eight tensor ops each rounded to the
// dtype (roundTo, through float32), in the compute type: AdamW's rounding
// points are between its ops, so the result must match bit for bit.
func adamWOpRef(d []dtype.DType, in []*tensor.Tensor) []expect {
	dt, s := d[0], adamWScalars(3)
	var p, m, v []float64
	if dt == dtype.F64 {
		p, m, v = in[0].Float64s(), in[2].Float64s(), in[3].Float64s()
		adamWRef(p, in[1].Float64s(), m, v, s, func(x float64) float64 { return x })
	} else {
		round := func(x float32) float32 { return x }
		if dt != dtype.F32 {
			round = func(x float32) float32 { return float32(roundTo(float64(x), formatOf(dt), false)) }
		}
		p32, m32, v32 := in[0].Float32s(), in[2].Float32s(), in[3].Float32s()
		adamWRef(p32, in[1].Float32s(), m32, v32, s, round)
		p, m, v = widen(p32), widen(m32), widen(v32)
	}
	return []expect{exact(dt, in[0].Shape(), p), exact(dt, in[2].Shape(), m), exact(dt, in[3].Shape(), v)}
}

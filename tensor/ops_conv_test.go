package tensor_test

import (
	"fmt"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// convGeoms are the convolutions of TestConv2d's table: padding, strides,
// non-square kernels, 1×1, and a batch whose im2col splits across cores.
var convGeoms = []tensor.ConvGeom{
	{N: 2, C: 3, H: 6, W: 5, Cout: 4, KH: 3, KW: 3, Stride: 1, Pad: 0},
	{N: 2, C: 3, H: 6, W: 5, Cout: 4, KH: 3, KW: 3, Stride: 2, Pad: 1},
	{N: 1, C: 2, H: 7, W: 7, Cout: 3, KH: 2, KW: 3, Stride: 2, Pad: 2},
	{N: 3, C: 4, H: 4, W: 4, Cout: 2, KH: 1, KW: 1, Stride: 1, Pad: 0},
	{N: 16, C: 4, H: 16, W: 16, Cout: 2, KH: 3, KW: 3, Stride: 1, Pad: 1}, // im2col split across cores
}

// The convolution rows of TestOps: Conv2d and both gradients, each a sum
// of products (γ_n of Σ|terms|, n the terms behind one element).
func convCases() []opCase {
	var cases []opCase
	for _, g := range convGeoms {
		g.OutH, g.OutW = (g.H+2*g.Pad-g.KH)/g.Stride+1, (g.W+2*g.Pad-g.KW)/g.Stride+1
		x, w, y := shape(g.N, g.C, g.H, g.W), shape(g.Cout, g.C, g.KH, g.KW), shape(g.N, g.Cout, g.OutH, g.OutW)
		name := fmt.Sprintf("%dx%dx%dx%d*%dx%dx%d/stride%d_pad%d", g.N, g.C, g.H, g.W, g.Cout, g.KH, g.KW, g.Stride, g.Pad)
		grads := runs(each(3, floats...), [][]dtype.DType{{dtype.BF16, dtype.BF16, dtype.F32}}) // x, w, dy
		cases = append(cases,
			opCase{name: "Conv2d/" + name, inputs: normals(x, w),
				dtypes: runs(each(2, floats...), [][]dtype.DType{{dtype.BF16, dtype.F32}, {dtype.F64, dtype.BF16}}),
				kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
					return outputs(tensor.Conv2d(in[0], in[1], g.Stride, g.Pad))
				},
				ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
					val, abs := refConv2d(in[0].Float64s(), in[1].Float64s(), g)
					out := promoted(d...)
					return []expect{bounded(out, computeOf(out), y, val, abs, g.C*g.KH*g.KW)}
				}},
			opCase{name: "Conv2dInputGrad/" + name, inputs: normals(x, w, y), dtypes: grads,
				kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
					return outputs(tensor.Conv2dInputGrad(in[0], in[1], in[2], g.Stride, g.Pad))
				},
				ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
					val, abs := refConv2dInputGrad(in[1].Float64s(), in[2].Float64s(), g)
					out := promoted(d[0], d[2])
					return []expect{bounded(out, computeOf(out), x, val, abs, inputGradTerms(g))}
				}},
			opCase{name: "Conv2dWeightGrad/" + name, inputs: normals(x, w, y), dtypes: grads,
				kernel: func(_ []dtype.DType, in []*tensor.Tensor) []*tensor.Tensor {
					return outputs(tensor.Conv2dWeightGrad(in[0], in[1], in[2], g.Stride, g.Pad))
				},
				ref: func(d []dtype.DType, in []*tensor.Tensor) []expect {
					val, abs := refConv2dWeightGrad(in[0].Float64s(), in[2].Float64s(), g)
					out := promoted(d[1], d[2])
					return []expect{bounded(out, computeOf(out), w, val, abs, g.N*g.OutH*g.OutW)}
				}})
	}
	return cases
}

package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// BenchmarkConv2d runs the forward and backward passes of the reference
// cnn's two convolutions (batch 32, 12×12 images).
func BenchmarkConv2d(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	randn := func(shape ...int) *tensor.Tensor { return randT(rng, dtype.F32, shape...) }
	for _, c := range []struct {
		name        string
		x, w        *tensor.Tensor
		stride, pad int
	}{
		{"conv1", randn(32, 1, 12, 12), randn(8, 1, 3, 3), 1, 1},
		{"conv2", randn(32, 8, 12, 12), randn(16, 8, 3, 3), 2, 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				y := tensor.Conv2d(c.x, c.w, c.stride, c.pad)
				dx := tensor.Conv2dInputGrad(c.x, c.w, y, c.stride, c.pad)
				dw := tensor.Conv2dWeightGrad(c.x, c.w, y, c.stride, c.pad)
				tensor.Free(y)
				tensor.Free(dx)
				tensor.Free(dw)
			}
		})
	}
}

// convTerms calls term(xi, wi, yi) for every product of Conv2d's sum: input
// element xi times weight wi adds to output element yi (the textbook loop,
// padding skipped).
func convTerms(g tensor.ConvGeom, term func(xi, wi, yi int)) {
	for n := range g.N {
		for o := range g.Cout {
			for oy := range g.OutH {
				for ox := range g.OutW {
					yi := ((n*g.Cout+o)*g.OutH+oy)*g.OutW + ox
					for c := range g.C {
						for ky := range g.KH {
							for kx := range g.KW {
								iy, ix := oy*g.Stride-g.Pad+ky, ox*g.Stride-g.Pad+kx
								if iy >= 0 && iy < g.H && ix >= 0 && ix < g.W {
									term(((n*g.C+c)*g.H+iy)*g.W+ix, ((o*g.C+c)*g.KH+ky)*g.KW+kx, yi)
								}
							}
						}
					}
				}
			}
		}
	}
}

// convSums returns, for each of n results, the sum of the products of
// Conv2d's sum that term assigns to it (term gives the result's index and
// the product), and the sum of their magnitudes.
func convSums(g tensor.ConvGeom, n int, term func(xi, wi, yi int) (int, float64)) (val, abs []float64) {
	val, abs = make([]float64, n), make([]float64, n)
	convTerms(g, func(xi, wi, yi int) {
		i, v := term(xi, wi, yi)
		val[i] += v
		abs[i] += math.Abs(v)
	})
	return val, abs
}

// refConv2d is Conv2d: y = Σ x·w for each output element.
func refConv2d(x, w []float64, g tensor.ConvGeom) (val, abs []float64) {
	return convSums(g, g.N*g.Cout*g.OutH*g.OutW, func(xi, wi, yi int) (int, float64) { return yi, x[xi] * w[wi] })
}

// refConv2dInputGrad is dx = Σ w·dy over the products that read each
// input element.
func refConv2dInputGrad(w, dy []float64, g tensor.ConvGeom) (val, abs []float64) {
	return convSums(g, g.N*g.C*g.H*g.W, func(xi, wi, yi int) (int, float64) { return xi, w[wi] * dy[yi] })
}

// refConv2dWeightGrad is dw = Σ x·dy over the products each weight takes
// part in.
func refConv2dWeightGrad(x, dy []float64, g tensor.ConvGeom) (val, abs []float64) {
	return convSums(g, g.Cout*g.C*g.KH*g.KW, func(xi, wi, yi int) (int, float64) { return wi, x[xi] * dy[yi] })
}

// inputGradTerms bounds the terms in the float32 sums behind one element
// of dx: Wᵀ·dy sums Cout products, then im2col's adjoint adds up to KH·KW
// of those, so γ_{Cout+KH·KW} covers both stages.
func inputGradTerms(g tensor.ConvGeom) int { return g.Cout + g.KH*g.KW }

// TestConv2dInputGradLowPrecision: for bf16 and f16 the input gradient is
// accumulated in scratch, which must start from zero. The free lists are
// stacks, so each call after the first gets the buffers the one before
// released: a kernel that adds into scratch it did not clear adds the
// previous gradient.
func TestConv2dInputGradLowPrecision(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 11))
	for _, g := range []tensor.ConvGeom{convGeoms[1], convGeoms[4]} { // the second splits im2col across cores
		g.OutH, g.OutW = (g.H+2*g.Pad-g.KH)/g.Stride+1, (g.W+2*g.Pad-g.KW)/g.Stride+1
		for _, dt := range []dtype.DType{dtype.BF16, dtype.F16} {
			x, w := randT(rng, dt, g.N, g.C, g.H, g.W), randT(rng, dt, g.Cout, g.C, g.KH, g.KW)
			dy := randT(rng, dt, g.N, g.Cout, g.OutH, g.OutW)
			val, abs := refConv2dInputGrad(w.Float64s(), dy.Float64s(), g)
			want := bounded(dt, dtype.F32, x.Shape(), val, abs, inputGradTerms(g))
			for call := range 3 {
				dx := tensor.Conv2dInputGrad(x, w, dy, g.Stride, g.Pad)
				check(t, fmt.Sprintf("%v %+v call %d", dt, g, call), dx, want)
				tensor.Free(dx)
			}
		}
	}
}

// TestConv2dAdjoint: the gradients are the adjoints of the convolution,
// <Conv2d(x, w), dy> = <x, InputGrad(dy)> = <w, WeightGrad(dy)>, in every
// float dtype, also for a batch whose im2col splits across cores. Each
// element r of a result is within u·|r| + η of the rounding of its
// computed value (u the dtype's unit roundoff, η half its smallest
// subnormal), which is within γ_n·Σ|terms| of the exact one; paired with
// the other operand o, a side is off by at most Σ|o|·(u·|r| + η) + γ_n·T,
// where T = Σ|x·w·dy| over all products is the same for the three
// pairings, and the float64 dot products add γ_len of about 2T.
func TestConv2dAdjoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, g := range []tensor.ConvGeom{convGeoms[1], convGeoms[2], convGeoms[4]} {
		g.OutH, g.OutW = (g.H+2*g.Pad-g.KH)/g.Stride+1, (g.W+2*g.Pad-g.KW)/g.Stride+1
		for _, dt := range floats {
			x, w := randn(rng, dt, 0, 1, g.N, g.C, g.H, g.W), randn(rng, dt, 0, 1, g.Cout, g.C, g.KH, g.KW)
			y := tensor.Conv2d(x, w, g.Stride, g.Pad)
			dy := randn(rng, dt, 0, 1, y.Shape()...)
			dx, dw := tensor.Conv2dInputGrad(x, w, dy, g.Stride, g.Pad), tensor.Conv2dWeightGrad(x, w, dy, g.Stride, g.Pad)
			xs, ws, gs := x.Float64s(), w.Float64s(), dy.Float64s()
			var total float64
			convTerms(g, func(xi, wi, yi int) { total += math.Abs(xs[xi] * ws[wi] * gs[yi]) })
			ud, uc, eta := unitRoundoff(dt), unitRoundoff(computeOf(dt)), halfSubnormal(dt)
			side := func(result, other *tensor.Tensor, n int) float64 {
				var s float64
				os := other.Float64s()
				for i, r := range result.Float64s() {
					s += math.Abs(os[i]) * (ud*math.Abs(r) + eta)
				}
				return s + gamma(n, uc)*total
			}
			dots := 2 * gamma(len(xs)+len(ws)+len(gs), unitRoundoff(dtype.F64)) * total
			lhs := side(y, dy, g.C*g.KH*g.KW)
			want := dot(y, dy)
			for _, c := range []struct {
				name     string
				got, tol float64
			}{
				{"<x, dx>", dot(x, dx), lhs + side(dx, x, inputGradTerms(g)) + dots},
				{"<w, dw>", dot(w, dw), lhs + side(dw, w, g.N*g.OutH*g.OutW) + dots},
			} {
				if math.Abs(c.got-want) > c.tol {
					t.Errorf("%v %+v: %s = %v, want <y, dy> = %v within %.3g", dt, g, c.name, c.got, want, c.tol)
				}
			}
		}
	}
}

// halfSubnormal is half the smallest subnormal of dt: the largest error of
// rounding to dt below its normal range.
func halfSubnormal(dt dtype.DType) float64 {
	if dt == dtype.F64 {
		return 0x1p-1074 / 2
	}
	f := formatOf(dt)
	return math.Ldexp(1, f.emin-f.precision)
}

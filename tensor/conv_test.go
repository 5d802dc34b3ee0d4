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

// refConv2dInputGrad is dx = Σ w·dy over the products that read each input
// element, and Σ|w·dy|.
func refConv2dInputGrad(w, dy []float64, g tensor.ConvGeom) (val, abs []float64) {
	val, abs = make([]float64, g.N*g.C*g.H*g.W), make([]float64, g.N*g.C*g.H*g.W)
	convTerms(g, func(xi, wi, yi int) {
		val[xi] += w[wi] * dy[yi]
		abs[xi] += math.Abs(w[wi] * dy[yi])
	})
	return val, abs
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
	for _, g := range []tensor.ConvGeom{
		{N: 2, C: 3, H: 6, W: 5, Cout: 4, KH: 3, KW: 3, Stride: 2, Pad: 1},
		{N: 16, C: 4, H: 16, W: 16, Cout: 2, KH: 3, KW: 3, Stride: 1, Pad: 1}, // im2col split across cores
	} {
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

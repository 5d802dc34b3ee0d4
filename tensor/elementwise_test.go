package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/vec"
	"github.com/weftml/weft/tensor"
)

func TestGELU(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 13))
	for _, dt := range []dtype.DType{dtype.F64, dtype.F32, dtype.BF16} {
		x, dy := randT(rng, dt, 7, 9), randT(rng, dt, 7, 9)
		xs, gs := x.Float64s(), dy.Float64s()
		wantY, wantDx := make([]float64, len(xs)), make([]float64, len(xs))
		for i, v := range xs {
			cdf := 0.5 * (1 + math.Erf(v/math.Sqrt2))
			wantY[i] = v * cdf
			wantDx[i] = gs[i] * (cdf + v*math.Exp(-v*v/2)/math.Sqrt(2*math.Pi))
		}
		y := tensor.GELU(x)
		if y.DType() != dt {
			t.Fatalf("%v: GELU gives %v", dt, y.DType())
		}
		near(t, dt.String()+" GELU", y, wantY, tol(dt))
		near(t, dt.String()+" GELUBackward", tensor.GELUBackward(x, dy), wantDx, tol(dt))
	}
}

// TestGELUBackwardRecomputesPhi: GELUBackward, which computes Φ(x) again,
// gives the bits of the backward that took GELU's Φ as a tensor: Φ in
// x's compute type (vec.GELU's float32, or float64), then dy·(Φ + x·φ(x))
// in the promoted one, over sizes that end mid-block and that split
// across cores.
func TestGELUBackwardRecomputesPhi(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 14))
	for _, d := range [][2]dtype.DType{
		{dtype.F32, dtype.F32}, {dtype.BF16, dtype.BF16}, {dtype.F16, dtype.F16}, {dtype.F64, dtype.F64},
		{dtype.BF16, dtype.F32}, {dtype.F32, dtype.F64}, {dtype.F64, dtype.F32},
	} {
		for _, shape := range [][]int{{5, 301}, {3, 45001}} {
			x, dy := randT(rng, d[0], shape...), randT(rng, d[1], shape...)
			xs, gs := x.Float64s(), dy.Float64s()
			cdf := make([]float64, len(xs))
			if d[0] == dtype.F64 {
				for i, v := range xs {
					cdf[i] = 0.5 * (1 + math.Erf(v/math.Sqrt2))
				}
			} else {
				x32, y32, c32 := make([]float32, len(xs)), make([]float32, len(xs)), make([]float32, len(xs))
				for i, v := range xs {
					x32[i] = float32(v)
				}
				vec.GELU(y32, c32, x32)
				for i, c := range c32 {
					cdf[i] = float64(c)
				}
			}
			got := tensor.GELUBackward(x, dy)
			want := make([]float64, len(xs))
			if got.DType() == dtype.F64 {
				for i, v := range xs {
					pdf := math.Exp(-0.5*v*v) / math.Sqrt(2*math.Pi)
					want[i] = gs[i] * (cdf[i] + v*pdf)
				}
			} else {
				x32, c32, g32, dx := make([]float32, len(xs)), make([]float32, len(xs)), make([]float32, len(xs)), make([]float32, len(xs))
				for i := range xs {
					x32[i], c32[i], g32[i] = float32(xs[i]), float32(cdf[i]), float32(gs[i])
				}
				vec.GELUBackward(dx, x32, c32, g32)
				want = tensor.FromFloat32(dx, shape...).To(got.DType()).Float64s()
			}
			for i, v := range got.Float64s() {
				if math.Float64bits(v) != math.Float64bits(want[i]) {
					t.Fatalf("%v x, %v dy, %v: dx[%d] = %g, want %g", d[0], d[1], shape, i, v, want[i])
				}
			}
		}
	}
}

// BenchmarkGELU times a GELU forward and backward pass over float32
// activations the size of a small and a wide MLP layer.
func BenchmarkGELU(b *testing.B) {
	rng := rand.New(rand.NewPCG(12, 12))
	for _, shape := range [][]int{{128, 128}, {64, 4096}} {
		x, dy := randT(rng, dtype.F32, shape...), randT(rng, dtype.F32, shape...)
		b.Run(fmt.Sprintf("%dx%d", shape[0], shape[1]), func(b *testing.B) {
			b.SetBytes(int64(x.Bytes()))
			for b.Loop() {
				y := tensor.GELU(x)
				dx := tensor.GELUBackward(x, dy)
				tensor.Release(y)
				tensor.Release(dx)
			}
		})
	}
}

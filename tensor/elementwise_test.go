package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/weftml/weft/dtype"
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

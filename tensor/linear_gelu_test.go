package tensor_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// TestLinearGELU checks that the fused LinearGELU gives bit for bit what
// Linear followed by GELU gives: h, GELU of h as rounded to its dtype, and
// Φ(h), for every float dtype (FP8 and packed FP4 included), mixed inputs,
// a bias of its own dtype, 3-D inputs, more than one k step and products
// split between goroutines; and that meta inputs give metas of the shapes.
func TestLinearGELU(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	dtypes := [][3]dtype.DType{ // x, w, bias
		{dtype.F64, dtype.F64, dtype.F64}, {dtype.F32, dtype.F32, dtype.F32}, {dtype.BF16, dtype.BF16, dtype.BF16},
		{dtype.F16, dtype.F16, dtype.F16}, {dtype.BF16, dtype.BF16, dtype.F32}, {dtype.BF16, dtype.F32, dtype.F32},
		{dtype.E4M3FN, dtype.E4M3FN, dtype.BF16}, {dtype.E2M1, dtype.E2M1, dtype.F32}, {dtype.F64, dtype.BF16, dtype.F32},
	}
	shapes := []struct{ x, w []int }{
		{shape(2, 3, 5), shape(4, 5)},
		{shape(7, 300), shape(9, 300)},      // two k steps of float32
		{shape(256, 96), shape(96, 96)},     // split between goroutines
		{shape(3, 40, 600), shape(70, 600)}, // two k steps of bfloat16 pairs, split
	}
	for _, d := range dtypes {
		for _, s := range shapes {
			for _, withBias := range []bool{false, true} {
				name := fmt.Sprintf("%v/%v/bias=%v", d, s.x, withBias)
				x, w := randomTensor(rng, d[0], s.x...), randomTensor(rng, d[1], s.w...)
				var bias *tensor.Tensor
				if withBias {
					bias = randomTensor(rng, d[2], s.w[0])
				}
				h, y := tensor.LinearGELU(x, w, bias)
				wantH := tensor.Linear(x, w, bias)
				wantY := tensor.GELU(wantH)
				for i, pair := range [][2]*tensor.Tensor{{h, wantH}, {y, wantY}} {
					got, want := pair[0], pair[1]
					if got.DType() != want.DType() || !slices.Equal(got.Shape(), want.Shape()) || !bytes.Equal(got.Data(), want.Data()) {
						t.Fatalf("%s: output %d is %v %v, want %v %v, or its bytes differ", name, i, got.DType(), got.Shape(), want.DType(), want.Shape())
					}
				}
				for _, o := range []*tensor.Tensor{h, y, wantH, wantY} {
					tensor.Release(o)
				}
			}
		}
	}
	h, y := tensor.LinearGELU(tensor.Meta(dtype.BF16, 2, 3, 5), tensor.Meta(dtype.BF16, 4, 5), tensor.Meta(dtype.BF16, 4))
	wantH := tensor.Linear(tensor.Meta(dtype.BF16, 2, 3, 5), tensor.Meta(dtype.BF16, 4, 5), nil)
	wantY := tensor.GELU(wantH)
	for i, pair := range [][2]*tensor.Tensor{{h, wantH}, {y, wantY}} {
		if got, want := pair[0], pair[1]; !got.IsMeta() || got.DType() != want.DType() || !slices.Equal(got.Shape(), want.Shape()) {
			t.Errorf("meta output %d is %v %v, want meta %v %v", i, got.DType(), got.Shape(), want.DType(), want.Shape())
		}
	}
}

// randomTensor is a tensor of normal values (some large, to reach GELU's
// tails and FP8's saturation) stored in dt.
func randomTensor(rng *rand.Rand, dt dtype.DType, shape ...int) *tensor.Tensor {
	vals := make([]float32, tensor.Numel(shape))
	for i := range vals {
		vals[i] = float32(rng.NormFloat64())
		if i%7 == 0 {
			vals[i] *= 8
		}
	}
	return tensor.FromFloat32(vals, shape...).To(dt)
}

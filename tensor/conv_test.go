package tensor_test

import (
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

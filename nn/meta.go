package nn

import (
	"math/rand/v2"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// Meta is the random source of a model built on shapes alone: a layer
// constructor given it (NewLinear(nn.Meta, 4096, 4096, true)) makes its
// parameters tensor.Meta values, which have a dtype and a shape and no
// storage, so that a plan converts and measures a model of any size
// without memory for its weights. Drawing a number from it panics.
var Meta = rand.New(metaSource{})

type metaSource struct{}

func (metaSource) Uint64() uint64 {
	panic("nn: nn.Meta builds layers on shapes alone and draws no random numbers")
}

// param returns a float32 parameter of shape with values from init, or a
// meta one when rng is Meta. The values are copied into pool storage, so
// that tensor.Memory counts the weights as it counts activations.
func param(rng *rand.Rand, init func(vals []float32), shape ...int) *autograd.Var {
	if rng == Meta {
		return autograd.Param(tensor.Meta(dtype.F32, shape...))
	}
	vals := make([]float32, tensor.Numel(shape))
	init(vals)
	wrapped := tensor.FromFloat32(vals, shape...)
	defer tensor.Free(wrapped)
	return autograd.Param(wrapped.Clone())
}

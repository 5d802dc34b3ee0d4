package fabric

import (
	"fmt"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// SeedEverything makes seed the one seed of the run: it decides the
// initial weights of a model built from InitModule and, through Seed, the
// order of the data a Dataset draws (Lightning's seed_everything).
func (f *Fabric) SeedEverything(seed uint64) { f.seed = seed }

// Seed is the seed SeedEverything set (0 until then).
func (f *Fabric) Seed() uint64 { return f.seed }

// InitModule returns the Init to build the model with, from the seed of
// SeedEverything (Lightning's init_module). With emptyInit the model is
// built on shapes alone (nn.Meta): SetupModule then draws each parameter
// from its initialiser, the whole of it on a strategy that keeps whole
// parameters and only this rank's chunks under fsdp, so that no rank ever
// holds the whole model; the values are those a build without emptyInit
// gives them, bit for bit.
func (f *Fabric) InitModule(emptyInit bool) *nn.Init {
	if emptyInit {
		return nn.Meta(f.seed)
	}
	return nn.NewInit(f.seed)
}

// materialize draws the whole value of every parameter of m built on
// shapes alone from its initialiser.
func materialize(m nn.Module) error {
	for _, p := range nn.Parameters(m) {
		v := p.Var
		if !v.Value.IsMeta() {
			continue
		}
		if v.Init == nil {
			return fmt.Errorf("fabric: setup: parameter %s is built on shapes alone and records no initialiser to draw it from", p.Path)
		}
		vals := make([]float32, v.Value.Len())
		v.Init.Fill(vals, 0)
		wrapped := tensor.FromFloat32(vals, v.Value.Shape()...)
		if dt := v.Value.DType(); dt != dtype.F32 {
			v.Value = wrapped.To(dt)
		} else {
			v.Value = wrapped.Clone() // into pool storage, which the allocator counts
		}
		tensor.Free(wrapped)
	}
	return nil
}

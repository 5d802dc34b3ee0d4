package fabric

import (
	"fmt"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// Seed is Config.Seed: the one seed of the run.
func (f *Fabric) Seed() uint64 { return f.cfg.Seed }

// InitModule returns the Init to build the model with, from Config.Seed
// (Lightning's init_module). With emptyInit the model is
// built on shapes alone (nn.Meta): SetupModule then draws each parameter
// from its initialiser, the whole of it on a strategy that keeps whole
// parameters and only this rank's chunks under fsdp, so that no rank ever
// holds the whole model; the values are those a build without emptyInit
// gives them, bit for bit.
func (f *Fabric) InitModule(emptyInit bool) *nn.Init {
	if emptyInit {
		return nn.Meta(f.cfg.Seed)
	}
	return nn.NewInit(f.cfg.Seed)
}

// materialize gives values to a model built on shapes alone (nn.Meta),
// one tensor at a time, so that the float model never exists whole: each
// frozen weight a quantizer holds as a shape is drawn and quantized, and
// with whole (a strategy that does not shard parameters, which fsdp's
// Reshard draws chunk by chunk) each parameter is drawn and cast to its
// storage dtype, the values a build with nn.NewInit converted to the same
// precision holds. A plan never calls it and stays on shapes.
func materialize(m nn.Module, whole bool) error {
	nn.Walk(m, func(_ string, mod nn.Module) {
		if l, ok := mod.(*nn.Linear); ok {
			if d, ok := l.GEMM.(interface{ Materialize() }); ok {
				d.Materialize()
			}
		}
	})
	if !whole {
		return nil
	}
	for _, p := range nn.Parameters(m) {
		v := p.Var
		if !v.Value.IsMeta() {
			continue
		}
		if v.Init == nil {
			return fmt.Errorf("fabric: setup: %s has a shape and no values, and records no initialiser to draw them from", p.Path)
		}
		drawn := tensor.Generate(func(dst []float32) { v.Init.Fill(dst, 0) }, v.Value.Shape()...)
		if dt := v.Value.DType(); dt != dtype.F32 {
			cast := drawn.To(dt)
			tensor.Free(drawn)
			drawn = cast
		}
		v.Value = drawn
	}
	return nil
}

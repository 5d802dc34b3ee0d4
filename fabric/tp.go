package fabric

import (
	"context"

	"github.com/weftml/weft/parallel"
)

// SplitTensors tells the fabric that its model is split across a
// tensor-parallel group by l (see parallel.Parallelize), so that its
// passes run the group's collectives on the step's context and return
// their errors; call it before the first step. The data-parallel strategy
// (Distribute) then runs over the mesh's other axis.
func (f *Fabric) SplitTensors(l *parallel.Layout) { f.tensors = l }

// guardTensors runs pass under the tensor-parallel layout's guard, if the
// model is split.
func (f *Fabric) guardTensors(ctx context.Context, pass func() error) error {
	if f.tensors == nil {
		return pass()
	}
	return f.tensors.Guard(ctx, pass)
}

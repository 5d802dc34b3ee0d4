package fabric

import (
	"context"
	"fmt"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// guardTensors runs pass under the tensor-parallel layout's guard, if the
// model is split.
func (f *Fabric) guardTensors(ctx context.Context, pass func() error) error {
	if f.tensors == nil {
		return pass()
	}
	return f.tensors.Guard(ctx, pass)
}

// meshAgreement is comm.Agreement over every rank of a mesh. Its
// collectives run outside any step's context (a scaler agrees in Step);
// the communicator's timeout bounds them.
type meshAgreement struct{ c comm.Communicator }

func (m meshAgreement) Any(found bool) (bool, error) {
	v := float32(0)
	if found {
		v = 1
	}
	v, err := m.Max(v)
	return v != 0, err
}

func (m meshAgreement) Max(v float32) (float32, error) {
	t := tensor.New(dtype.F32, 1)
	defer tensor.Free(t)
	t.Fill(float64(v))
	if err := comm.AllReduceTensor(context.Background(), m.c, t, comm.Max); err != nil {
		return 0, fmt.Errorf("fabric: agreeing over the mesh: %w", err)
	}
	return t.Float32s()[0], nil
}

// gradSquares is the sum of the squares of every gradient element of the
// model, as one device holds it: over the chunks of every data-parallel
// rank when the optimizer shards, and over the shares of every rank of the
// tensor-parallel group for a split tensor (a replicated one counts once).
func (f *Fabric) gradSquares(params []nn.NamedParam) (float64, error) {
	ctx := context.Background()
	var sq, split float64
	for _, p := range params {
		if p.Var.Grad == nil {
			continue
		}
		n := p.Var.Grad.Norm()
		if f.tensors != nil && f.tensors.Splits(p.Path) {
			split += n * n
		} else {
			sq += n * n
		}
	}
	var err error
	if f.tensors != nil {
		if split, err = comm.SumFloat64(ctx, f.tensors.Group, split); err != nil {
			return 0, fmt.Errorf("fabric: the gradient norm: %w", err)
		}
	}
	sq += split
	if f.dist != nil && f.dist.Info.Sharding.OptimizerState { // each rank holds its chunks' gradients
		if sq, err = f.dist.SumChunks(ctx, sq); err != nil {
			return 0, err
		}
	}
	return sq, nil
}

// On a mesh a checkpoint holds every tensor as one device holds it, so
// that it loads onto any mesh shape (and one device) through Load.

// wholeParam is parameter i as one device holds it: gathered along the
// mesh column if the strategy holds a chunk of it (fsdp), then along the
// row if it is split. Every rank of the mesh must ask for the same
// parameters in one order; the caller frees a result that is not p's
// value.
func (f *Fabric) wholeParam(ctx context.Context, i int, p nn.NamedParam) (*tensor.Tensor, error) {
	v := p.Var.Value
	if v.IsMeta() && f.dist != nil {
		t, release, err := f.dist.Whole(ctx, i)
		if err != nil {
			return nil, err
		}
		defer release()
		v = t
	}
	w, err := f.tensors.Gather(ctx, p.Var, v)
	if err == nil && w == v && v != p.Var.Value {
		w = v.Clone() // v is released on return
	}
	return w, err
}

// wholeMoment is an optimizer moment of parameter i, p, as one device holds
// it: its chunks joined along the column if the optimizer shards (zero1
// and up), then gathered along the row if p is split.
func (f *Fabric) wholeMoment(ctx context.Context, i int, p nn.NamedParam, moment *tensor.Tensor) (*tensor.Tensor, error) {
	share := moment
	if f.shardedOptimizer() {
		var err error
		if share, err = f.joinChunks(ctx, i, 1, moment, p.Var.Value.Shape()); err != nil { // the share's shape (a stand-in under fsdp)
			return nil, err
		}
	}
	w, err := f.tensors.Gather(ctx, p.Var, share)
	if share != moment && w != share {
		tensor.Free(share)
	}
	return w, err
}

// wholeLike is like's dtype in the shape one device holds of parameter p
// (like itself off a mesh).
func (f *Fabric) wholeLike(p nn.NamedParam, like *tensor.Tensor) *tensor.Tensor {
	if f.tensors == nil {
		return like
	}
	return tensor.Meta(like.DType(), f.tensors.WholeShape(p.Var)...)
}

// shareOf is this rank's share of whole, a checkpoint's value of
// parameter p or of its moment (whole itself off a mesh).
func (f *Fabric) shareOf(p nn.NamedParam, whole *tensor.Tensor) (*tensor.Tensor, error) {
	if f.tensors == nil {
		return whole, nil
	}
	s, err := f.tensors.Share(p.Var, whole)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return s, nil
}

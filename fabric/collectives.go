package fabric

import (
	"context"
	"fmt"
	"strconv"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/local"
	"github.com/weftml/weft/tensor"
)

// The collectives of Lightning Fabric (all_gather, all_reduce, broadcast,
// barrier) on tensors, over the ranks of Config.Comm: every rank must
// make the same calls in the same order, with tensors of one dtype and
// shape. They work before and after Setup, and after Setup run in turn
// with the strategy's own collectives. A fabric that was never distributed
// is a world of one rank, so a loop written for many ranks runs unchanged
// on one. The results are new tensors, which the caller frees; the inputs
// are left as they are.

// Reduction is how AllReduce combines the ranks' tensors.
type Reduction uint8

const (
	Sum  Reduction = iota + 1
	Mean           // the sum, rounded to the tensor's dtype, times 1/world size (as gradients are averaged)
	Max            // NaN if any rank's element is NaN
	Min            // NaN if any rank's element is NaN
)

func (r Reduction) String() string {
	switch r {
	case Sum:
		return "sum"
	case Mean:
		return "mean"
	case Max:
		return "max"
	case Min:
		return "min"
	}
	return "Reduction(" + strconv.Itoa(int(r)) + ")"
}

// AllGather returns every rank's t in rank order, stacked on a new leading
// axis of the world's size: [world, t's shape...], as Lightning's
// all_gather does, on one rank too.
func (f *Fabric) AllGather(ctx context.Context, t *tensor.Tensor) (*tensor.Tensor, error) {
	if err := operand("allgather", t); err != nil {
		return nil, err
	}
	out := tensor.New(t.DType(), append([]int{f.worldSize()}, t.Shape()...)...)
	return f.fill(ctx, out, func(ctx context.Context, c comm.Communicator) error {
		return comm.AllGatherTensor(ctx, c, t, out)
	})
}

// AllReduce returns the reduction of t over ranks, element by element in
// t's dtype (accumulated in float32, float64 for float64 tensors, in rank
// order, so every rank and backend gets the same bits).
func (f *Fabric) AllReduce(ctx context.Context, t *tensor.Tensor, op Reduction) (*tensor.Tensor, error) {
	if err := operand("allreduce", t); err != nil {
		return nil, err
	}
	var cop comm.Op
	switch op {
	case Sum, Mean:
		cop = comm.Sum
	case Max:
		cop = comm.Max
	case Min:
		cop = comm.Min
	default:
		return nil, fmt.Errorf("fabric: allreduce: unknown reduction %v (accepted: sum, mean, max, min)", op)
	}
	if op == Mean && !t.DType().IsFloat() {
		return nil, fmt.Errorf("fabric: allreduce: the mean of the %v tensor %v would not be one; use Sum and divide", t.DType(), t)
	}
	out := t.Clone()
	reduced, err := f.fill(ctx, out, func(ctx context.Context, c comm.Communicator) error {
		return comm.AllReduceTensor(ctx, c, out, cop)
	})
	if err == nil && op == Mean {
		reduced.ScaleInPlace(1 / float64(f.worldSize()))
	}
	return reduced, err
}

// Broadcast returns rank src's t on every rank.
func (f *Fabric) Broadcast(ctx context.Context, t *tensor.Tensor, src int) (*tensor.Tensor, error) {
	if err := operand("broadcast", t); err != nil {
		return nil, err
	}
	// Checked here, not left to comm: after Setup a failed call fails
	// every later one of the strategy's, whatever the cause.
	if n := f.worldSize(); src < 0 || src >= n {
		return nil, fmt.Errorf("fabric: broadcast: src rank %d outside [0, %d)", src, n)
	}
	out := t.Clone()
	return f.fill(ctx, out, func(ctx context.Context, c comm.Communicator) error {
		return comm.BroadcastTensor(ctx, c, out, src)
	})
}

// Barrier returns once every rank has called it.
func (f *Fabric) Barrier(ctx context.Context) error {
	err := f.collective(ctx, func(ctx context.Context, c comm.Communicator) error { return c.Barrier(ctx) })
	if err != nil {
		return fmt.Errorf("fabric: %w", err)
	}
	return nil
}

// fill runs the collective fn, which fills out: it returns out, or frees
// it if fn fails.
func (f *Fabric) fill(ctx context.Context, out *tensor.Tensor, fn func(context.Context, comm.Communicator) error) (*tensor.Tensor, error) {
	if err := f.collective(ctx, fn); err != nil {
		tensor.Free(out)
		return nil, fmt.Errorf("fabric: %w", err)
	}
	return out, nil
}

// operand reports whether t has values to communicate.
func operand(coll string, t *tensor.Tensor) error {
	if t == nil || t.IsMeta() {
		return fmt.Errorf("fabric: %s needs a tensor with values, got %v", coll, t)
	}
	return nil
}

// worldSize is the number of ranks the fabric's collectives span.
func (f *Fabric) worldSize() int {
	switch {
	case f.dist != nil:
		return f.dist.Comm().Size()
	case f.distCfg != nil:
		return f.distCfg.comm.Size()
	}
	return 1
}

// collective runs fn on the fabric's communicator: through the strategy's
// rank once Setup made one, directly before (nothing else is in flight
// then), and on a group of one rank for a fabric never distributed.
func (f *Fabric) collective(ctx context.Context, fn func(context.Context, comm.Communicator) error) error {
	switch {
	case f.dist != nil:
		return f.dist.Collective(ctx, fn)
	case f.distCfg != nil:
		return fn(ctx, f.distCfg.comm)
	}
	solo := local.NewGroup(1, local.Options{})[0]
	defer solo.Close()
	return fn(ctx, solo)
}

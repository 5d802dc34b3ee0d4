package comm

import (
	"context"
	"fmt"
	"slices"

	"github.com/weftml/weft/tensor"
)

// The collectives on tensors are what strategies call: a tensor brings
// its dtype, which decides a reduction's arithmetic, and its shape, which
// they check, so that code above comm never handles a tensor's raw bytes
// (a device backend's tensors will not have any on the host). They fail
// before any communication on a meta tensor, mismatched dtypes or shapes,
// with the collective named, and leave the group usable.

// AllReduceTensor replaces t on every rank with the reduction over ranks
// of every rank's t, computed in t's dtype as Reduce does.
func AllReduceTensor(ctx context.Context, c Communicator, t *tensor.Tensor, op Op) error {
	if err := stored(AllReduce, "t", t); err != nil {
		return err
	}
	return c.AllReduce(ctx, t.Data(), t.DType(), op)
}

// AllGatherTensor sets recv on every rank to every rank's send in rank
// order, as torch.distributed.all_gather_into_tensor does: recv is the
// ranks' sends stacked on a new leading axis ([Size, send's shape...]) or
// concatenated along the first ([Size·send.Dim(0), send's other axes...]),
// of send's dtype.
func AllGatherTensor(ctx context.Context, c Communicator, send, recv *tensor.Tensor) error {
	if err := parts(AllGather, c.Size(), "recv", recv, "send", send); err != nil {
		return err
	}
	return c.AllGather(ctx, send.Data(), recv.Data())
}

// ReduceScatterTensor sets recv on rank r to the reduction over ranks of
// block r of send, in send's dtype; send is Size blocks shaped like recv,
// stacked or concatenated as AllGatherTensor's recv is.
func ReduceScatterTensor(ctx context.Context, c Communicator, send, recv *tensor.Tensor, op Op) error {
	if err := parts(ReduceScatter, c.Size(), "send", send, "recv", recv); err != nil {
		return err
	}
	return c.ReduceScatter(ctx, send.Data(), recv.Data(), send.DType(), op)
}

// BroadcastTensor copies t on rank root to t on every other rank, whose t
// must have root's dtype and shape.
func BroadcastTensor(ctx context.Context, c Communicator, t *tensor.Tensor, root int) error {
	if err := stored(Broadcast, "t", t); err != nil {
		return err
	}
	return c.Broadcast(ctx, t.Data(), root)
}

// stored reports whether t has values to communicate.
func stored(coll Collective, name string, t *tensor.Tensor) error {
	switch {
	case t == nil:
		return fmt.Errorf("comm: %s: %s is nil", coll, name)
	case t.IsMeta():
		return fmt.Errorf("comm: %s: %s is the meta tensor %v, which has a shape and no values", coll, name, t)
	}
	return nil
}

// parts reports whether whole is size blocks shaped like block, stacked or
// concatenated, of block's dtype, split at whole bytes.
func parts(coll Collective, size int, wholeName string, whole *tensor.Tensor, blockName string, block *tensor.Tensor) error {
	if err := stored(coll, wholeName, whole); err != nil {
		return err
	}
	if err := stored(coll, blockName, block); err != nil {
		return err
	}
	if whole.DType() != block.DType() {
		return fmt.Errorf("comm: %s: %s is %v and %s %v; they must share a dtype", coll, wholeName, whole, blockName, block)
	}
	shape := block.Shape()
	stacked := append([]int{size}, shape...)
	ok := slices.Equal(whole.Shape(), stacked)
	if len(shape) > 0 {
		concatenated := append([]int{size * shape[0]}, shape[1:]...)
		ok = ok || slices.Equal(whole.Shape(), concatenated)
	}
	if !ok {
		return fmt.Errorf("comm: %s: %s is %v, want %v (%d ranks' %s %v stacked) or %d× its first axis",
			coll, wholeName, whole, stacked, size, blockName, block, size)
	}
	if whole.Bytes() != size*block.Bytes() {
		return fmt.Errorf("comm: %s: %s %v does not split into %d parts of whole bytes", coll, wholeName, whole, size)
	}
	return nil
}

package tensor

import (
	"fmt"
	"slices"

	"github.com/weftml/weft/dtype"
)

// Meta returns a tensor with a dtype and a shape and no storage: what a
// plan converts and measures instead of a weight (PyTorch's "meta"
// device). Bytes reports what the tensor would hold; To and Reshape give
// meta tensors; every kernel that reads or writes elements panics, naming
// the tensor.
func Meta(dt dtype.DType, shape ...int) *Tensor {
	if Numel(shape) < 0 {
		panic(fmt.Sprintf("tensor: meta tensor of negative shape %v", slices.Clone(shape))) // shape stays on the caller's stack
	}
	t := header(dt, nil, shape)
	t.meta = true
	return t
}

// NewLike returns a zero-filled tensor of dt and shape, or a meta one when
// like is meta: what a conversion of like allocates for its result.
func NewLike(like *Tensor, dt dtype.DType, shape ...int) *Tensor {
	if like.IsMeta() {
		return Meta(dt, shape...)
	}
	return New(dt, shape...)
}

// anyMeta reports whether any of ts is a meta tensor: an op over one
// returns a meta result of the dtype and shape it would compute, and
// computes nothing (a plan's forward pass).
func anyMeta(ts ...*Tensor) bool {
	for _, t := range ts {
		if t != nil && t.meta {
			return true
		}
	}
	return false
}

// PoolBytes is what the pool hands out for a tensor of n elements of dt,
// as Memory counts it: its storage rounded up to the buffer's size class,
// or to the slab granule for a large one.
func PoolBytes(dt dtype.DType, n int) int64 {
	return held((dt.StorageBytes(n)+7)/8, 8)
}

// ScratchBytes is what a kernel's float32 scratch of n elements holds in
// the pool (decoding a tensor stored in another dtype to compute on it).
func ScratchBytes(n int) int64 {
	return held(n, 4)
}

// IsMeta reports whether t is a meta tensor (see Meta).
func (t *Tensor) IsMeta() bool { return t.meta }

// stored panics if t is a meta tensor: op is about to touch elements
// that t does not have.
func (t *Tensor) stored(op string) {
	if t.meta {
		panic(fmt.Sprintf("tensor: %s of the meta tensor %v, which has a shape and no storage (a plan's stand-in); build the model with weights to compute with it", op, t))
	}
}

// errMetaKernel is stored's panic for the raw views, which stay cheap
// enough to inline.
const errMetaKernel = "tensor: a kernel on a meta tensor, which has a shape and no storage (a plan's stand-in); build the model with weights to compute with it"

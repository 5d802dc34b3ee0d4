package autograd

import (
	"math"

	"github.com/weftml/weft/tensor"
)

// Linear returns x·wᵀ + b (b may be nil) for x [..., in], w [out, in].
func (tp *Tape) Linear(x, w, b *Var) *Var {
	x, w, b = tp.autocast(OpLinear, x), tp.autocast(OpLinear, w), tp.autocast(OpLinear, b)
	var bias *tensor.Tensor
	if b != nil {
		bias = b.Value
	}
	in := w.Value.Dim(1)
	return tp.record(tensor.Linear(x.Value, w.Value, bias), func(dy *tensor.Tensor) {
		dy2, x2 := dy.Reshape(-1, dy.Dim(-1)), x.Value.Reshape(-1, in)
		tp.accumulate(x, tensor.MatMul(dy2, w.Value, false, false).Reshape(x.Value.Shape()...))
		tp.accumulate(w, tensor.MatMul(dy2, x2, true, false))
		if b != nil {
			tp.accumulate(b, tensor.ReduceBroadcast(dy2, b.Value.Shape(), 1, dy.DType()))
		}
	}, x, w, b)
}

// MatMul returns a·b, or a·bᵀ with transB, over the last two axes of a
// and b, where b is batched like a or is one matrix shared by every batch.
func (tp *Tape) MatMul(a, b *Var, transB bool) *Var {
	a, b = tp.autocast(OpMatMul, a), tp.autocast(OpMatMul, b)
	return tp.record(tensor.MatMul(a.Value, b.Value, false, transB), func(dy *tensor.Tensor) {
		tp.accumulate(a, tensor.MatMul(dy, b.Value, false, !transB))
		av := a.Value
		if len(b.Value.Shape()) == 2 { // shared b: its gradient sums over the batch
			av, dy = av.Reshape(-1, av.Dim(-1)), dy.Reshape(-1, dy.Dim(-1))
		}
		if transB { // c = a·bᵀ: db = dyᵀ·a
			tp.accumulate(b, tensor.MatMul(dy, av, true, false))
		} else { // c = a·b: db = aᵀ·dy
			tp.accumulate(b, tensor.MatMul(av, dy, true, false))
		}
	}, a, b)
}

// Conv2d returns the 2-D cross-correlation of x [N, C, H, W] with
// w [Cout, C, KH, KW] plus b [Cout] (nil for none), the bias added as its
// own op after the convolution is rounded, as PyTorch's cuDNN path does.
func (tp *Tape) Conv2d(x, w, b *Var, stride, pad int) *Var {
	x, w = tp.autocast(OpConv2d, x), tp.autocast(OpConv2d, w)
	y := tp.record(tensor.Conv2d(x.Value, w.Value, stride, pad), func(dy *tensor.Tensor) {
		dx, dw := tensor.Conv2dBackward(x.Value, w.Value, dy, stride, pad)
		tp.accumulate(x, dx)
		tp.accumulate(w, dw)
	}, x, w)
	if b == nil {
		return y
	}
	return tp.AddBroadcast(y, b, 1)
}

// Add returns a + b for same-shaped a and b.
func (tp *Tape) Add(a, b *Var) *Var { return tp.AddBroadcast(a, b, 0) }

// AddBroadcast returns a + b with b spanning a's axes [from, from+rank(b)).
func (tp *Tape) AddBroadcast(a, b *Var, from int) *Var {
	a, b = tp.autocast(OpAdd, a), tp.autocast(OpAdd, b)
	return tp.record(tensor.AddBroadcast(a.Value, b.Value, from), func(dy *tensor.Tensor) {
		tp.accumulate(a, dy)
		tp.accumulate(b, tensor.ReduceBroadcast(dy, b.Value.Shape(), from, dy.DType()))
	}, a, b)
}

// Scale returns x·s.
func (tp *Tape) Scale(x *Var, s float64) *Var {
	x = tp.autocast(OpMul, x)
	return tp.record(tensor.Scale(x.Value, s), func(dy *tensor.Tensor) {
		tp.accumulate(x, tensor.Scale(dy, s))
	}, x)
}

// GELU is the exact erf form.
func (tp *Tape) GELU(x *Var) *Var {
	x = tp.autocast(OpGELU, x)
	y, cdf := tensor.GELU(x.Value)
	return tp.record(y, func(dy *tensor.Tensor) {
		tp.accumulate(x, tensor.GELUBackward(x.Value, cdf, dy))
		tensor.Release(cdf)
	}, x)
}

// ReLU returns max(x, 0).
func (tp *Tape) ReLU(x *Var) *Var {
	x = tp.autocast(OpReLU, x)
	y := tensor.ReLU(x.Value)
	return tp.record(y, func(dy *tensor.Tensor) {
		tp.accumulate(x, tensor.ReLUBackward(y, dy))
	}, x)
}

// CausalMask sets the entries above the diagonal of the last two axes to
// -inf (masked_fill), so softmax gives them zero weight.
func (tp *Tape) CausalMask(x *Var) *Var {
	x = tp.autocast(OpMaskedFill, x)
	return tp.record(tensor.CausalMask(x.Value, math.Inf(-1)), func(dy *tensor.Tensor) {
		tp.accumulate(x, tensor.CausalMask(dy, 0))
	}, x)
}

// Softmax normalises over the last axis.
func (tp *Tape) Softmax(x *Var) *Var {
	x = tp.autocast(OpSoftmax, x)
	y := tensor.Softmax(x.Value)
	return tp.record(y, func(dy *tensor.Tensor) {
		tp.accumulate(x, tensor.SoftmaxBackward(y, dy))
	}, x)
}

// LayerNorm normalises over the last axis: (x-mean)/sqrt(var+eps)·w + b.
func (tp *Tape) LayerNorm(x, w, b *Var, eps float64) *Var {
	x, w, b = tp.autocast(OpLayerNorm, x), tp.autocast(OpLayerNorm, w), tp.autocast(OpLayerNorm, b)
	y, mean, rstd := tensor.LayerNorm(x.Value, w.Value, b.Value, eps)
	return tp.record(y, func(dy *tensor.Tensor) {
		dx, dw, db := tensor.LayerNormBackward(x.Value, w.Value, mean, rstd, dy)
		tensor.Release(mean)
		tensor.Release(rstd)
		tp.accumulate(x, dx)
		tp.accumulate(w, dw)
		tp.accumulate(b, db)
	}, x, w, b)
}

// Embedding gathers rows of table [V, C]: the result has shape
// append(shape, C), and len(idx) must equal the product of shape.
func (tp *Tape) Embedding(table *Var, idx []int, shape ...int) (*Var, error) {
	table = tp.autocast(OpEmbedding, table)
	rows, err := tensor.Embedding(table.Value, idx)
	if err != nil {
		return nil, err
	}
	c := table.Value.Dim(1)
	return tp.record(rows.Reshape(append(append([]int(nil), shape...), c)...), func(dy *tensor.Tensor) {
		tp.accumulate(table, tensor.EmbeddingBackward(dy.Reshape(-1, c), idx, table.Value.Dim(0), dy.DType()))
	}, table), nil
}

// Reshape returns a view of x with a new shape (one axis may be -1).
func (tp *Tape) Reshape(x *Var, shape ...int) *Var {
	in := x.Value.Shape()
	return tp.record(x.Value.Reshape(shape...), func(dy *tensor.Tensor) {
		tp.accumulate(x, dy.Reshape(in...))
	}, x)
}

// Permute reorders x's axes: output axis i is input axis perm[i].
func (tp *Tape) Permute(x *Var, perm ...int) *Var {
	inv := tensor.InversePermutation(perm)
	return tp.record(tensor.Permute(x.Value, perm...), func(dy *tensor.Tensor) {
		tp.accumulate(x, tensor.Permute(dy, inv...))
	}, x)
}

// Narrow returns x restricted to [start, start+length) of its last axis.
func (tp *Tape) Narrow(x *Var, start, length int) *Var {
	c := x.Value.Dim(-1)
	return tp.record(tensor.Narrow(x.Value, start, length), func(dy *tensor.Tensor) {
		tp.accumulate(x, tensor.Unnarrow(dy, start, c))
	}, x)
}

// CrossEntropy returns the mean cross-entropy of logits [N, C] against
// class targets.
func (tp *Tape) CrossEntropy(logits *Var, targets []int) (*Var, error) {
	logits = tp.autocast(OpCrossEntropy, logits)
	loss, err := tensor.CrossEntropy(logits.Value, targets)
	if err != nil {
		return nil, err
	}
	return tp.record(loss, func(dy *tensor.Tensor) {
		tp.accumulate(logits, tensor.CrossEntropyBackward(logits.Value, targets, dy))
	}, logits), nil
}

package autograd

import (
	"math"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// Each op computes its result, records a node, and names the function
// that, given the node and the gradient of its result, accumulates the
// gradients of its inputs. A gradient an input does not need is not
// computed.

// Linear returns x·wᵀ + b (b may be nil) for x [..., in], w [out, in].
func (tp *Tape) Linear(x, w, b *Var) *Var {
	in := tp.linearInputs(x, w, b)
	return in.record(tp, tensor.LinearAs(in.x.Value, in.w.Value, in.wdt, in.bias()))
}

// linearIn is a linear's inputs as autocast made them (x, w, b), the Vars
// x and w were cast from by casts made for this linear alone (nil where no
// cast was made), and the dtype the GEMMs read w as: autocast's, which
// for a float32 w and bfloat16 or float16 is the GEMMs' to make while
// packing (tensor.LinearAs), so that no low-precision copy of the weight
// is held from forward to backward.
type linearIn struct {
	x, w, b *Var
	from    [2]*Var
	wdt     dtype.DType
}

// linearInputs autocasts a linear's inputs.
func (tp *Tape) linearInputs(x, w, b *Var) linearIn {
	in := linearIn{x: tp.autocast(OpLinear, x), w: w, b: tp.autocast(OpLinear, b), wdt: tp.castFor(OpLinear, w.Value.DType())}
	if in.wdt != dtype.BF16 && in.wdt != dtype.F16 || w.Value.DType() != dtype.F32 {
		in.w = tp.autocast(OpLinear, w)
		in.wdt = in.w.Value.DType()
	}
	// Backward may hand x's gradient straight to its source only if no
	// other gradient reaches that source between the linear's backward
	// and the cast's, which only w's and b's casts could give it.
	if in.x != x && x != w && x != b {
		in.from[0] = x
	}
	if in.w != w {
		in.from[1] = w
	}
	return in
}

// bias is b's value, nil for none.
func (in *linearIn) bias() *tensor.Tensor {
	if in.b == nil {
		return nil
	}
	return in.b.Value
}

// record records h, the linear's result.
func (in *linearIn) record(tp *Tape, h *tensor.Tensor) *Var {
	n := tp.record(h, linearBackward, readsIn0|readsIn1, in.x, in.w, in.b)
	n.castFrom, n.wdt = in.from, in.wdt
	return &n.out
}

// LinearGELU is GELU(exit(Linear(x, w, b))), where exit closes the linear
// module's precision scope (see Enter): one GEMM whose epilogue computes
// the GELU from the linear's output as rounded, recorded as the two ops it
// stands for, so backward is theirs. Where exit changes that output (a cast
// at the scope's edge) or GELU's autocast would, the GELU runs on its own.
func (tp *Tape) LinearGELU(x, w, b *Var, exit func(*Var) *Var) *Var {
	in := tp.linearInputs(x, w, b)
	h, y := tensor.LinearGELUAs(in.x.Value, in.w.Value, in.wdt, in.bias())
	hv := in.record(tp, h)
	if out := exit(hv); out != hv || tp.castFor(OpGELU, h.DType()) != h.DType() {
		tensor.Free(y)
		return tp.GELU(out)
	}
	return &tp.record(y, geluBackward, readsIn0, hv).out
}

// linearBackward computes the gradients of x and w in the dtype of the Var
// each goes to: where autocast cast them for this linear, the cast's
// source, which then takes the product's rounding in the GEMM's epilogue
// (tensor.MatMulTo) and skips the cast's backward, bit for bit the same.
func linearBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	x, w, b := n.in[0], n.in[1], n.in[2]
	dy2 := dy.Reshape(-1, dy.Dim(-1))
	defer tensor.Free(dy2)
	if x.requiresGrad {
		to := n.gradTarget(0)
		tp.accumulate(to, tensor.MatMulAsTo(dy2, w.Value, n.wdt, false, false, to.Value.DType()).Reshape(x.Value.Shape()...))
	}
	if w.requiresGrad {
		to := n.gradTarget(1)
		x2 := x.Value.Reshape(-1, w.Value.Dim(1))
		tp.accumulate(to, tensor.MatMulTo(dy2, x2, true, false, to.Value.DType()))
		tensor.Free(x2)
	}
	if b != nil && b.requiresGrad {
		tp.accumulate(b, tensor.ReduceBroadcast(dy2, b.Value.Shape(), 1, dy.DType()))
	}
}

// MatMul returns a·b, or a·bᵀ with transB, over the last two axes of a
// and b, where b is batched like a or is one matrix shared by every batch.
func (tp *Tape) MatMul(a, b *Var, transB bool) *Var {
	a, b = tp.autocast(OpMatMul, a), tp.autocast(OpMatMul, b)
	n := tp.record(tensor.MatMul(a.Value, b.Value, false, transB), matMulBackward, readsIn0|readsIn1, a, b)
	n.flag = transB
	return &n.out
}

func matMulBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	a, b, transB := n.in[0], n.in[1], n.flag
	if a.requiresGrad {
		tp.accumulate(a, tensor.MatMul(dy, b.Value, false, !transB))
	}
	if !b.requiresGrad {
		return
	}
	av := a.Value
	if len(b.Value.Shape()) == 2 { // shared b: its gradient sums over the batch
		av, dy = av.Reshape(-1, av.Dim(-1)), dy.Reshape(-1, dy.Dim(-1))
		defer tensor.Free(av)
		defer tensor.Free(dy)
	}
	if transB { // c = a·bᵀ: db = dyᵀ·a
		tp.accumulate(b, tensor.MatMul(dy, av, true, false))
	} else { // c = a·b: db = aᵀ·dy
		tp.accumulate(b, tensor.MatMul(av, dy, true, false))
	}
}

// Conv2d returns the 2-D cross-correlation of x [N, C, H, W] with
// w [Cout, C, KH, KW] plus b [Cout] (nil for none), the bias added as its
// own op after the convolution is rounded, as PyTorch's cuDNN path does.
// Autocast casts all three inputs, the bias too, so under bf16 autocast the
// add is a bf16 op whose result is rounded again.
func (tp *Tape) Conv2d(x, w, b *Var, stride, pad int) *Var {
	x, w, b = tp.autocast(OpConv2d, x), tp.autocast(OpConv2d, w), tp.autocast(OpConv2d, b)
	n := tp.record(tensor.Conv2d(x.Value, w.Value, stride, pad), conv2dBackward, readsIn0|readsIn1, x, w)
	n.ints[0], n.ints[1] = stride, pad
	if b == nil {
		return &n.out
	}
	return tp.AddBroadcast(&n.out, b, 1)
}

func conv2dBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	x, w, stride, pad := n.in[0], n.in[1], n.ints[0], n.ints[1]
	if x.requiresGrad {
		tp.accumulate(x, tensor.Conv2dInputGrad(x.Value, w.Value, dy, stride, pad))
	}
	if w.requiresGrad {
		tp.accumulate(w, tensor.Conv2dWeightGrad(x.Value, w.Value, dy, stride, pad))
	}
}

// Add returns a + b for same-shaped a and b.
func (tp *Tape) Add(a, b *Var) *Var { return tp.AddBroadcast(a, b, 0) }

// AddBroadcast returns a + b with b spanning a's axes [from, from+rank(b)).
func (tp *Tape) AddBroadcast(a, b *Var, from int) *Var {
	a, b = tp.autocast(OpAdd, a), tp.autocast(OpAdd, b)
	n := tp.record(tensor.AddBroadcast(a.Value, b.Value, from), addBackward, readsNone, a, b)
	n.ints[0] = from
	return &n.out
}

func addBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	a, b := n.in[0], n.in[1]
	tp.accumulate(a, dy)
	if b.requiresGrad {
		tp.accumulate(b, tensor.ReduceBroadcast(dy, b.Value.Shape(), n.ints[0], dy.DType()))
	}
}

// Scale returns x·s.
func (tp *Tape) Scale(x *Var, s float64) *Var {
	x = tp.autocast(OpMul, x)
	n := tp.record(tensor.Scale(x.Value, s), scaleBackward, readsNone, x)
	n.scale = s
	return &n.out
}

func scaleBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	tp.accumulate(n.in[0], tensor.Scale(dy, n.scale))
}

// GELU is the exact erf form. Its backward recomputes Φ(x) from x, as
// PyTorch's does, rather than keep it.
func (tp *Tape) GELU(x *Var) *Var {
	x = tp.autocast(OpGELU, x)
	return &tp.record(tensor.GELU(x.Value), geluBackward, readsIn0, x).out
}

func geluBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	tp.accumulate(n.in[0], tensor.GELUBackward(n.in[0].Value, dy))
}

// ReLU returns max(x, 0).
func (tp *Tape) ReLU(x *Var) *Var {
	x = tp.autocast(OpReLU, x)
	return &tp.record(tensor.ReLU(x.Value), reluBackward, readsOut, x).out
}

func reluBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	tp.accumulate(n.in[0], tensor.ReLUBackward(n.out.Value, dy))
}

// CausalMask sets the entries above the diagonal of the last two axes to
// -inf (masked_fill), so softmax gives them zero weight.
func (tp *Tape) CausalMask(x *Var) *Var {
	x = tp.autocast(OpMaskedFill, x)
	return &tp.record(tensor.CausalMask(x.Value, math.Inf(-1)), causalMaskBackward, readsNone, x).out
}

func causalMaskBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	tp.accumulate(n.in[0], tensor.CausalMask(dy, 0))
}

// Softmax normalises over the last axis.
func (tp *Tape) Softmax(x *Var) *Var {
	x = tp.autocast(OpSoftmax, x)
	return &tp.record(tensor.Softmax(x.Value), softmaxBackward, readsOut, x).out
}

func softmaxBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	tp.accumulate(n.in[0], tensor.SoftmaxBackward(n.out.Value, dy))
}

// LayerNorm normalises over the last axis: (x-mean)/sqrt(var+eps)·w + b.
func (tp *Tape) LayerNorm(x, w, b *Var, eps float64) *Var {
	x, w, b = tp.autocast(OpLayerNorm, x), tp.autocast(OpLayerNorm, w), tp.autocast(OpLayerNorm, b)
	y, mean, rstd := tensor.LayerNorm(x.Value, w.Value, b.Value, eps)
	n := tp.record(y, layerNormBackward, readsIn0|readsIn1, x, w, b)
	n.save(mean, rstd)
	return &n.out
}

func layerNormBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	x, w, b := n.in[0], n.in[1], n.in[2]
	mean, rstd := n.saved[0], n.saved[1]
	dx, dw, db := tensor.LayerNormBackward(x.Value, w.Value, mean, rstd, dy)
	tp.accumulate(x, dx)
	tp.accumulate(w, dw)
	tp.accumulate(b, db)
}

// Embedding gathers rows of table [V, C]: the result has shape
// append(shape, C), and len(idx) must equal the product of shape.
func (tp *Tape) Embedding(table *Var, idx []int, shape ...int) (*Var, error) {
	table = tp.autocast(OpEmbedding, table)
	rows, err := tensor.Embedding(table.Value, idx, shape...)
	if err != nil {
		return nil, err
	}
	n := tp.record(rows, embeddingBackward, readsNone, table)
	n.idx = idx
	return &n.out, nil
}

func embeddingBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	table := n.in[0]
	dy2 := dy.Reshape(-1, table.Value.Dim(1))
	tp.accumulate(table, tensor.EmbeddingBackward(dy2, n.idx, table.Value.Dim(0), dy.DType()))
	tensor.Free(dy2)
}

// Reshape returns a view of x with a new shape (one axis may be -1).
func (tp *Tape) Reshape(x *Var, shape ...int) *Var {
	return &tp.record(x.Value.Reshape(shape...), reshapeBackward, readsNone, x).out
}

func reshapeBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	x := n.in[0]
	tp.accumulate(x, dy.Reshape(x.Value.Shape()...))
}

// Permute reorders x's axes: output axis i is input axis perm[i] (at most
// eight axes, as tensor.Permute).
func (tp *Tape) Permute(x *Var, perm ...int) *Var {
	n := tp.record(tensor.Permute(x.Value, perm...), permuteBackward, readsNone, x)
	for i, p := range perm {
		n.ints[p] = i // the inverse permutation
	}
	return &n.out
}

func permuteBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	x := n.in[0]
	tp.accumulate(x, tensor.Permute(dy, n.ints[:len(x.Value.Shape())]...))
}

// Narrow returns x restricted to [start, start+length) of its last axis.
func (tp *Tape) Narrow(x *Var, start, length int) *Var {
	n := tp.record(tensor.Narrow(x.Value, start, length), narrowBackward, readsNone, x)
	n.ints[0] = start
	return &n.out
}

func narrowBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	x := n.in[0]
	tp.accumulate(x, tensor.Unnarrow(dy, n.ints[0], x.Value.Dim(-1)))
}

// CrossEntropy returns the mean cross-entropy of logits [N, C] against
// class targets.
func (tp *Tape) CrossEntropy(logits *Var, targets []int) (*Var, error) {
	logits = tp.autocast(OpCrossEntropy, logits)
	loss, err := tensor.CrossEntropy(logits.Value, targets)
	if err != nil {
		return nil, err
	}
	n := tp.record(loss, crossEntropyBackward, readsIn0, logits)
	n.idx = targets
	return &n.out, nil
}

func crossEntropyBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	logits := n.in[0]
	tp.accumulate(logits, tensor.CrossEntropyBackward(logits.Value, n.idx, dy))
}

// GELUTanh is GPT-2's tanh approximation of GELU.
func (tp *Tape) GELUTanh(x *Var) *Var {
	x = tp.autocast(OpGELU, x)
	return &tp.record(tensor.GELUTanh(x.Value), geluTanhBackward, readsIn0, x).out
}

func geluTanhBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	tp.accumulate(n.in[0], tensor.GELUTanhBackward(n.in[0].Value, dy))
}

// SiLU returns x·σ(x).
func (tp *Tape) SiLU(x *Var) *Var {
	x = tp.autocast(OpSiLU, x)
	return &tp.record(tensor.SiLU(x.Value), siluBackward, readsIn0, x).out
}

func siluBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	tp.accumulate(n.in[0], tensor.SiLUBackward(n.in[0].Value, dy))
}

// Mul returns a·b elementwise for same-shaped a and b.
func (tp *Tape) Mul(a, b *Var) *Var {
	a, b = tp.autocast(OpMul, a), tp.autocast(OpMul, b)
	return &tp.record(tensor.Mul(a.Value, b.Value), mulBackward, readsIn0|readsIn1, a, b).out
}

func mulBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	a, b := n.in[0], n.in[1]
	if a.requiresGrad {
		tp.accumulate(a, tensor.Mul(dy, b.Value))
	}
	if b.requiresGrad {
		tp.accumulate(b, tensor.Mul(dy, a.Value))
	}
}

// RMSNorm normalises over the last axis: x/sqrt(mean(x²)+eps)·w.
func (tp *Tape) RMSNorm(x, w *Var, eps float64) *Var {
	x, w = tp.autocast(OpRMSNorm, x), tp.autocast(OpRMSNorm, w)
	y, rstd := tensor.RMSNorm(x.Value, w.Value, eps)
	n := tp.record(y, rmsNormBackward, readsIn0|readsIn1, x, w)
	n.save(rstd)
	return &n.out
}

func rmsNormBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	x, w := n.in[0], n.in[1]
	dx, dw := tensor.RMSNormBackward(x.Value, w.Value, n.saved[0], dy)
	tp.accumulate(x, dx)
	tp.accumulate(w, dw)
}

// Rotary turns x (..., T, hs) by rotary position embeddings of base theta
// (tensor.Rotary, HF Llama's rotate_half convention).
func (tp *Tape) Rotary(x *Var, theta float64) *Var {
	x = tp.autocast(OpRotary, x)
	n := tp.record(tensor.Rotary(x.Value, theta, false), rotaryBackward, readsNone, x)
	n.scale = theta
	return &n.out
}

func rotaryBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	tp.accumulate(n.in[0], tensor.Rotary(dy, n.scale, true))
}

package nn

import (
	"fmt"
	"math"

	"github.com/weftml/weft/autograd"
)

// CausalSelfAttention is multi-head attention in which position t attends
// to positions ≤ t. It runs as one fused op (autograd.CausalAttention),
// which never holds the (B, nh, T, T) scores and rounds where the op-by-op
// path would; with OpByOp, or when the precision in force casts the
// attention's ops in a way the fused op does not model, it is written out
// op by op as nanoGPT's slow path does (so every rounding point matches
// PyTorch's).
//
// B = batch, T = sequence length, C = embedding width, nh = heads, hs = C/nh.
//
// Under tensor parallelism QKV holds the q, k and v columns of the rank's
// heads only and Proj the matching input columns: the head count the
// forward pass runs is the one QKV's output has room for, so that a split
// needs no change here.
type CausalSelfAttention struct {
	QKV   *Linear // C -> 3C, split into q, k, v in that order
	Proj  *Linear // C -> C
	Heads int     // 2: of the whole layer, which fix the head size
	// OpByOp computes the attention op by op, keeping the scores and
	// probabilities for backward (nanoGPT without flash): false.
	OpByOp bool
}

func NewCausalSelfAttention(init *Init, width, heads int) *CausalSelfAttention {
	return &CausalSelfAttention{QKV: NewLinear(init, width, 3*width, true), Proj: NewLinear(init, width, width, true), Heads: heads}
}

func (a *CausalSelfAttention) Forward(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	hs := x.Value.Dim(-1) / a.Heads
	qkv := a.QKV.Forward(tp, x) // (B, T, 3·nh·hs): nh is a.Heads, or this rank's share of them
	nh := qkv.Value.Dim(-1) / (3 * hs)
	return a.Proj.Forward(tp, CausalAttention(tp, qkv, nh, a.OpByOp))
}

// CausalAttention is the attention of CausalSelfAttention between its
// projections: from qkv (B, T, 3C) of heads heads to y (B, T, C), fused
// unless opByOp is set or the tape's precision rounds in a way the fused
// op does not model.
func CausalAttention(tp *autograd.Tape, qkv *autograd.Var, heads int, opByOp bool) *autograd.Var {
	if !opByOp {
		if y, ok := tp.CausalAttention(qkv, heads); ok {
			return y // (B, T, C)
		}
	}
	shape := qkv.Value.Shape()
	b, t, c := shape[0], shape[1], shape[2]/3
	hs := c / heads
	head := func(i int) *autograd.Var {
		part := tp.Reshape(tp.Narrow(qkv, i*c, c), b, t, heads, hs) // (B, T, nh, hs)
		return tp.Permute(part, 0, 2, 1, 3)                         // (B, nh, T, hs)
	}
	q, k, v := head(0), head(1), head(2)
	att := tp.Scale(tp.MatMul(q, k, true), 1/math.Sqrt(float64(hs))) // (B, nh, T, T)
	att = tp.Softmax(tp.CausalMask(att))
	y := tp.MatMul(att, v, false)                         // (B, nh, T, hs)
	return tp.Reshape(tp.Permute(y, 0, 2, 1, 3), b, t, c) // (B, T, C)
}

func (a *CausalSelfAttention) Params() []Param { return nil }

// Children names the projections "qkv" and "proj"; a block that keeps them
// at its own level (as the reference gpt does) lists these as its children.
func (a *CausalSelfAttention) Children() []Child {
	return []Child{{Name: "qkv", Module: a.QKV}, {Name: "proj", Module: a.Proj}}
}

// CheckSplit accepts a split of the projections by whole heads only: a
// rank runs the heads its qkv holds.
func (a *CausalSelfAttention) CheckSplit(ranks int) error {
	if a.Heads%ranks != 0 {
		return fmt.Errorf("%d attention heads do not split evenly over %d ranks", a.Heads, ranks)
	}
	return nil
}

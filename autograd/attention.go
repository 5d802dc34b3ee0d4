package autograd

import (
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// CausalAttention returns multi-head causal self-attention over qkv
// [B, T, 3C] (q, k and v side by side, as a Linear computes them) as one
// fused op (tensor.CausalAttention): [B, T, C], the heads side by side. It
// saves only each row's softmax maximum and sum for backward, where the op-by-op path
// (q·kᵀ, scale, masked_fill, softmax, ·v) keeps several [B, heads, T, T]
// results.
//
// The kernel rounds where the op-by-op path would under the tape's
// Caster: the scores, their scaling and every GEMM's result in the
// GEMMs' autocast dtype, the probabilities in softmax's. ok is false when
// the Caster casts those ops some other way (scaling or masking in another
// dtype than the GEMMs, a format the kernel does not compute in), and
// nothing is recorded: compute op by op then.
func (tp *Tape) CausalAttention(qkv *Var, heads int) (y *Var, ok bool) {
	gemmDT := tp.castFor(OpMatMul, qkv.Value.DType())
	probs, ok := tp.attentionProbs(gemmDT)
	if !ok {
		return nil, false
	}
	qkv = tp.Cast(qkv, gemmDT)
	out, stats := tensor.CausalAttention(qkv.Value, heads, probs)
	n := tp.record(out, causalAttentionBackward, readsIn0, qkv)
	n.save(stats)
	n.ints[0], n.ints[1] = heads, int(probs)
	return &n.out, true
}

// attentionProbs returns the dtype the op-by-op path's softmax leaves the
// probabilities in, when its other ops run in the GEMMs' dtype gemmDT as
// the fused kernel assumes.
func (tp *Tape) attentionProbs(gemmDT dtype.DType) (dtype.DType, bool) {
	switch gemmDT {
	case dtype.F64, dtype.F32, dtype.BF16, dtype.F16:
	default:
		return dtype.Invalid, false
	}
	if tp.castFor(OpMul, gemmDT) != gemmDT || tp.castFor(OpMaskedFill, gemmDT) != gemmDT {
		return dtype.Invalid, false
	}
	probs := tp.castFor(OpSoftmax, gemmDT)
	compute := dtype.F32
	if gemmDT == dtype.F64 {
		compute = dtype.F64
	}
	if (probs != gemmDT && probs != compute) || tp.castFor(OpMatMul, probs) != gemmDT {
		return dtype.Invalid, false
	}
	return probs, true
}

func causalAttentionBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	qkv := n.in[0]
	tp.accumulate(qkv, tensor.CausalAttentionBackward(qkv.Value, n.saved[0], dy, n.ints[0], dtype.DType(n.ints[1])))
}

package autograd_test

import (
	"math/rand/v2"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
)

// castOne is a Caster that casts one op's inputs to one dtype.
type castOne struct {
	op autograd.Op
	to dtype.DType
}

func (c castOne) CastInput(op autograd.Op, in dtype.DType) dtype.DType {
	if op == c.op {
		return c.to
	}
	return in
}

// The fused attention declines, recording nothing, when the Caster would
// make the op-by-op path round where the kernel does not, and runs where
// it models the rounding.
func TestCausalAttentionDeclines(t *testing.T) {
	qkv := randn(rand.New(rand.NewPCG(3, 3)), 2, 5, 12).To(dtype.F32)
	for _, c := range []struct {
		caster autograd.Caster
		fused  bool
	}{
		{nil, true},
		{castOne{autograd.OpMatMul, dtype.BF16}, true},      // softmax in bf16 too
		{castOne{autograd.OpSoftmax, dtype.F64}, false},     // probabilities wider than the compute type
		{castOne{autograd.OpMul, dtype.F64}, false},         // the scaling in another dtype
		{castOne{autograd.OpMaskedFill, dtype.BF16}, false}, // the mask in another dtype
		{castOne{autograd.OpMatMul, dtype.E4M3FN}, false},   // a format the kernel does not compute in
	} {
		tp := &autograd.Tape{Caster: c.caster}
		y, ok := tp.CausalAttention(autograd.Param(qkv), 2)
		if ok != c.fused || (y != nil) != c.fused {
			t.Errorf("caster %+v: fused %v (y %v), want %v", c.caster, ok, y, c.fused)
		}
		if n, _ := tp.Retained(); !c.fused && n != 0 {
			t.Errorf("caster %+v: declined but the tape holds %d tensors", c.caster, n)
		}
	}
}

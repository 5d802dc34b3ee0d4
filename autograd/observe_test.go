package autograd_test

import (
	"slices"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// TestObserveSeesEachOp: Observe sees every op the tape records, with the
// class its inputs were autocast for: the casts autocast makes and shape
// ops autocast nothing, and an op whose inputs needed no cast has its
// class all the same; on a NoGrad tape too.
func TestObserveSeesEachOp(t *testing.T) {
	for _, noGrad := range []bool{false, true} {
		var ops []autograd.Op
		var dtypes []dtype.DType
		tp := &autograd.Tape{Caster: castOne{autograd.OpMul, dtype.BF16}, NoGrad: noGrad, Recycle: true}
		tp.Observe = func(op autograd.Op, out *autograd.Var, in []*autograd.Var) {
			ops, dtypes = append(ops, op), append(dtypes, out.Value.DType())
		}
		a, b := autograd.Param(tensor.Meta(dtype.F32, 2, 3)), autograd.Param(tensor.Meta(dtype.F32, 2, 3))
		y := tp.Permute(tp.Mul(a, b), 1, 0)
		tp.Add(y, y)
		want := []autograd.Op{"", "", autograd.OpMul, "", autograd.OpAdd} // cast a, cast b, mul, permute, add
		wantDTypes := []dtype.DType{dtype.BF16, dtype.BF16, dtype.BF16, dtype.BF16, dtype.BF16}
		if !slices.Equal(ops, want) || !slices.Equal(dtypes, wantDTypes) {
			t.Errorf("noGrad %v: observed %q in %v, want %q in %v", noGrad, ops, dtypes, want, wantDTypes)
		}
		tp.Reset()
	}
}

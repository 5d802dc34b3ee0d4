package tensor

import (
	"fmt"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/gemm"
)

// ScaledMatMul returns (scaleA·op(a))·(scaleB·op(b)) for matrices a and b,
// rounded once to out: the scaled GEMM of FP8 training (cuBLASLt's scale
// pointers, torch._scaled_mm). Each element is decoded from its storage
// dtype and multiplied by its scale while GEMM packs it, and products are
// accumulated in float32, so an E4M3 operand with scale 1/s is the FP8 GEMM
// of a tensor quantized as x·s. A scale of 0 means 1, as in gemm.Matrix.
func ScaledMatMul(a, b *Tensor, transA, transB bool, scaleA, scaleB float32, out dtype.DType) *Tensor {
	if len(a.shape) != 2 || len(b.shape) != 2 {
		panic(fmt.Sprintf("tensor: ScaledMatMul needs matrices, got %v and %v", a, b))
	}
	m, k := a.shape[0], a.shape[1]
	if transA {
		m, k = k, m
	}
	kb, n := b.shape[0], b.shape[1]
	if transB {
		kb, n = n, kb
	}
	if k != kb {
		panic(fmt.Sprintf("tensor: ScaledMatMul shapes %v and %v (transA=%v transB=%v) do not match", a, b, transA, transB))
	}
	if anyMeta(a, b) {
		return Meta(out, m, n)
	}
	opA, opB := operand(a, 0, transA), operand(b, 0, transB)
	opA.Scale, opB.Scale = scaleA, scaleB
	res := empty(out, m, n) // GEMM with beta 0 writes every element
	if out == dtype.F64 {   // float32 products, widened
		c := scratch[float32](m * n)
		gemm.F32(m, n, k, opA, opB, 0, c, n)
		storeAs(res, c)
		release(c)
		return res
	}
	c := buf[float32](res)
	gemm.F32(m, n, k, opA, opB, 0, c, n)
	put(res, c)
	return res
}

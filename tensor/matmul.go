package tensor

import (
	"fmt"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/gemm"
)

// MatMul returns op(a)·op(b) over the last two axes, where op transposes when
// asked: a [..., M, K], b [..., K, N] (or [K, N], shared by every batch).
// Inputs are read in their storage dtype, accumulated in float32 (float64
// when the result is F64), and the result is rounded once to the promoted dtype.
func MatMul(a, b *Tensor, transA, transB bool) *Tensor {
	return matmul(a, b, transA, transB, nil)
}

// Linear returns x·wᵀ + bias for x [..., in], w [out, in], bias [out] or nil,
// adding the bias before the single rounding as cuBLAS's addmm does.
func Linear(x, w, bias *Tensor) *Tensor {
	in := x.Dim(-1)
	if anyMeta(x, w, bias) {
		var dims [8]int
		return Meta(promoteAll(x, w), append(append(dims[:0], x.shape[:len(x.shape)-1]...), w.Dim(0))...)
	}
	x2 := x.Reshape(-1, in)
	out := matmul(x2, w, false, true, bias)
	Free(x2)
	var dims [8]int // same elements as out's [M, N] rows, no view needed
	out.setShape(append(append(dims[:0], x.shape[:len(x.shape)-1]...), w.Dim(0)))
	return out
}

// matmul returns op(a)·op(b), plus bias [N] (nil for none) before the
// rounding. The GEMM's epilogue adds the bias and rounds the float32 sums
// into a low-precision result while they are in cache.
func matmul(a, b *Tensor, transA, transB bool, bias *Tensor) *Tensor {
	ra, rb := len(a.shape), len(b.shape)
	if ra < 2 || rb < 2 {
		panic(fmt.Sprintf("tensor: matmul needs matrices, got %v and %v", a, b))
	}
	m, k := a.shape[ra-2], a.shape[ra-1]
	if transA {
		m, k = k, m
	}
	kb, n := b.shape[rb-2], b.shape[rb-1]
	if transB {
		kb, n = n, kb
	}
	batch := Numel(a.shape[:ra-2])
	sharedB := rb == 2
	if k != kb || (!sharedB && !EqualShape(a.shape[:ra-2], b.shape[:rb-2])) {
		panic(fmt.Sprintf("tensor: matmul shapes %v and %v (transA=%v transB=%v) do not match", a, b, transA, transB))
	}
	var dims [8]int
	shape := append(append(dims[:0], a.shape[:ra-2]...), m, n)
	if anyMeta(a, b) {
		return Meta(promoteAll(a, b), shape...)
	}
	out := empty(promoteAll(a, b), shape...) // GEMM with beta 0 writes every element
	strideA, strideB := m*k, k*n
	if sharedB {
		strideB = 0
	}
	if out.dtype == dtype.F64 {
		as, bs, c := get[float64](a), get[float64](b), out.f64()
		ep := gemm.Epilogue[float64]{Bias: getOrNil[float64](bias)}
		for i := range batch {
			gemm.DgemmEpilogue(transA, transB, m, n, k, as[i*strideA:], a.shape[ra-1], bs[i*strideB:], b.shape[rb-1], 0, c[i*m*n:], n, ep)
		}
		dropOrNil(bias, ep.Bias)
		return out
	}
	ep := gemm.Epilogue[float32]{Bias: getOrNil[float32](bias)}
	defer dropOrNil(bias, ep.Bias)
	if native[float32](out) || out.dtype.Bits()%8 != 0 {
		// float32 sums in place, or rounded whole by put: rows of packed
		// codes may share bytes.
		c := buf[float32](out)
		for i := range batch {
			gemm.F32Epilogue(m, n, k, operand(a, i*strideA, transA), operand(b, i*strideB, transB), c[i*m*n:], n, ep)
		}
		put(out, c)
		return out
	}
	// One batch's float32 sums at a time, which the epilogue rounds into out.
	c := scratch[float32](m * n)
	ep.OutDType = out.dtype
	for i := range batch {
		ep.Out = out.data[out.dtype.StorageBytes(i*m*n):]
		gemm.F32Epilogue(m, n, k, operand(a, i*strideA, transA), operand(b, i*strideB, transB), c, n, ep)
	}
	release(c)
	return out
}

// getOrNil is get, or nil for a nil t.
func getOrNil[T float](t *Tensor) []T {
	if t == nil {
		return nil
	}
	return get[T](t)
}

// dropOrNil is drop for what getOrNil returned.
func dropOrNil[T float](t *Tensor, vals []T) {
	if t != nil {
		drop(t, vals)
	}
}

// operand describes the matrix starting at element off of t for GEMM, which
// dequantizes it while packing.
func operand(t *Tensor, off int, trans bool) gemm.Matrix {
	if t.meta {
		panic(errMetaKernel)
	}
	start := t.dtype.StorageBytes(off)
	return gemm.Matrix{DType: t.dtype, Data: t.data[start:], LD: t.shape[len(t.shape)-1], Trans: trans}
}

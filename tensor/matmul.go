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
	p := matmul(a, b, transA, transB)
	p.commit()
	return p.out
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
	p := matmul(x2, w, false, true)
	Free(x2)
	if bias != nil {
		if p.f64 != nil {
			bs := get[float64](bias)
			addRows(p.f64, bs)
			drop(bias, bs)
		} else {
			bs := get[float32](bias)
			addRows(p.f32, bs)
			drop(bias, bs)
		}
	}
	p.commit()
	var dims [8]int // same elements as out's [M, N] rows, no view needed
	p.out.setShape(append(append(dims[:0], x.shape[:len(x.shape)-1]...), w.Dim(0)))
	return p.out
}

// addRows adds bias to each row of c, large products split by rows.
func addRows[T float](c, bias []T) {
	n := len(bias)
	if parts := parallelParts(len(c)); parts <= 1 {
		addRowsRange(c, bias)
	} else {
		parallelSplit(len(c)/n, parts, func(lo, hi int) { addRowsRange(c[lo*n:hi*n], bias) })
	}
}

func addRowsRange[T float](c, bias []T) {
	for r := 0; r < len(c); r += len(bias) {
		for j, v := range bias {
			c[r+j] += v
		}
	}
}

// product is a matmul's output tensor and the accumulator holding the
// product, f32 or f64: out's own storage when out is F32 or F64, else
// pooled scratch for commit to round.
type product struct {
	out *Tensor
	f32 []float32
	f64 []float64
}

// commit rounds the accumulator into out (a no-op when it is out's own
// storage).
func (p product) commit() {
	if p.out.meta {
		return
	}
	if p.f64 != nil {
		put(p.out, p.f64)
	} else {
		put(p.out, p.f32)
	}
}

// matmul multiplies without rounding.
func matmul(a, b *Tensor, transA, transB bool) product {
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
		return product{out: Meta(promoteAll(a, b), shape...)}
	}
	out := empty(promoteAll(a, b), shape...) // GEMM with beta 0 writes every element
	strideA, strideB := m*k, k*n
	if sharedB {
		strideB = 0
	}
	if out.dtype == dtype.F64 {
		as, bs, c := get[float64](a), get[float64](b), buf[float64](out)
		for i := range batch {
			gemm.Dgemm(transA, transB, m, n, k, as[i*strideA:], a.shape[ra-1], bs[i*strideB:], b.shape[rb-1], 0, c[i*m*n:], n)
		}
		return product{out: out, f64: c}
	}
	c := buf[float32](out)
	for i := range batch {
		gemm.F32(m, n, k, operand(a, i*strideA, transA), operand(b, i*strideB, transB), 0, c[i*m*n:], n)
	}
	return product{out: out, f32: c}
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

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
	out, _ := matmul(a, b, b.dtype, transA, transB, nil, false, promoteAll(a, b))
	return out
}

// MatMulTo returns MatMul(a, b, transA, transB).To(dt), bit for bit. For a
// float32 dt and a product in a narrower float of whole bytes (bf16, f16,
// FP8), the GEMM's epilogue rounds the float32 sums in place, instead of
// writing a low-precision result and widening it in a second pass: an
// autocast op's gradient headed back to float32.
func MatMulTo(a, b *Tensor, transA, transB bool, dt dtype.DType) *Tensor {
	return MatMulAsTo(a, b, b.dtype, transA, transB, dt)
}

// MatMulAsTo is MatMulTo with b read as if cast to bdt first, bit for bit:
// b itself where bdt is its dtype, else a float32 b rounded to bdt (BF16 or
// F16) while the GEMM packs it, without the copy a cast would make.
func MatMulAsTo(a, b *Tensor, bdt dtype.DType, transA, transB bool, dt dtype.DType) *Tensor {
	if prod := Promote(a.dtype, bdt); dt != prod && (dt != dtype.F32 || !roundsInEpilogue(prod)) {
		out, _ := matmul(a, b, bdt, transA, transB, nil, false, prod)
		defer Free(out)
		return out.To(dt)
	}
	out, _ := matmul(a, b, bdt, transA, transB, nil, false, dt)
	return out
}

// roundsInEpilogue reports whether the GEMM's epilogue rounds float32 sums
// to dt in place (gemm.Epilogue.Round).
func roundsInEpilogue(dt dtype.DType) bool {
	return dt.IsFloat() && dt.Bits() < 32 && dt.Bits()%8 == 0
}

// Linear returns x·wᵀ + bias for x [..., in], w [out, in], bias [out] or nil,
// adding the bias before the single rounding as cuBLAS's addmm does.
func Linear(x, w, bias *Tensor) *Tensor {
	return LinearAs(x, w, w.dtype, bias)
}

// LinearAs is Linear with w read as MatMulAsTo reads b with bdt wdt: a
// float32 weight rounded to wdt while packing where wdt is BF16 or F16.
func LinearAs(x, w *Tensor, wdt dtype.DType, bias *Tensor) *Tensor {
	h, _ := linear(x, w, wdt, bias, false)
	return h
}

// LinearGELU returns h = Linear(x, w, bias) and y = GELU(h), bit for bit:
// the GEMM's epilogue computes the GELU from h as rounded, while it is in
// cache, instead of a pass reading h back.
func LinearGELU(x, w, bias *Tensor) (h, y *Tensor) {
	return LinearGELUAs(x, w, w.dtype, bias)
}

// LinearGELUAs is LinearGELU with w read as LinearAs reads it.
func LinearGELUAs(x, w *Tensor, wdt dtype.DType, bias *Tensor) (h, y *Tensor) {
	if dt := Promote(x.dtype, wdt); anyMeta(x, w, bias) || dt == dtype.F64 || dt.Bits()%8 != 0 {
		h = LinearAs(x, w, wdt, bias) // float64 and packed codes take two passes
		return h, GELU(h)
	}
	return linear(x, w, wdt, bias, true)
}

// linear is Linear, and with gelu LinearGELU for a byte-addressable
// float32-computed result.
func linear(x, w *Tensor, wdt dtype.DType, bias *Tensor, gelu bool) (h, y *Tensor) {
	in := x.Dim(-1)
	var dims [8]int // same elements as the product's [M, N] rows, no view needed
	shape := append(append(dims[:0], x.shape[:len(x.shape)-1]...), w.Dim(0))
	if anyMeta(x, w, bias) {
		return Meta(Promote(x.dtype, wdt), shape...), nil
	}
	x2 := x.Reshape(-1, in)
	h, y = matmul(x2, w, wdt, false, true, bias, gelu, Promote(x.dtype, wdt))
	Free(x2)
	for _, t := range []*Tensor{h, y} {
		if t != nil {
			t.setShape(shape)
		}
	}
	return h, y
}

// matmul returns op(a)·op(b), b read as bdt (see MatMulAsTo), plus bias
// [N] (nil for none) before the rounding, in dtype dt: the operands' promoted dtype, or float32 holding
// that dtype's values (see MatMulTo). The GEMM's epilogue adds the bias and
// rounds the float32 sums into a low-precision result while they are in
// cache; with gelu (for a float32-computed, byte-addressable result only)
// it also returns GELU of the rounded result.
func matmul(a, b *Tensor, bdt dtype.DType, transA, transB bool, bias *Tensor, gelu bool, dt dtype.DType) (out, y *Tensor) {
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
		return Meta(dt, shape...), nil
	}
	out = empty(dt, shape...) // GEMM with beta 0 writes every element
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
		return out, nil
	}
	ep := gemm.Epilogue[float32]{Bias: getOrNil[float32](bias)}
	defer dropOrNil(bias, ep.Bias)
	if prod := Promote(a.dtype, bdt); prod != dt {
		ep.Round = prod
	}
	if gelu {
		y = empty(out.dtype, shape...)
	}
	// Each batch's float32 sums go into out itself (float32), or into
	// scratch the epilogue rounds into out, or, for packed codes whose
	// rows may share bytes, into scratch put rounds whole.
	var c []float32
	switch {
	case native[float32](out):
		c = out.f32()
	case out.dtype.Bits()%8 == 0:
		c, ep.OutDType = scratch[float32](m*n), out.dtype
	default:
		c = scratch[float32](out.Len())
	}
	for i := range batch {
		at, cAt := i*m*n, i*m*n
		if ep.OutDType != dtype.Invalid {
			ep.Out, cAt = out.data[out.dtype.StorageBytes(at):], 0
		}
		if gelu {
			ep.GELU = y.data[y.dtype.StorageBytes(at):]
		}
		bm := operand(b, i*strideB, transB)
		if bdt != b.dtype {
			bm.Round = bdt
		}
		gemm.F32Epilogue(m, n, k, operand(a, i*strideA, transA), bm, c[cAt:], n, ep)
	}
	if ep.OutDType != dtype.Invalid {
		release(c)
	} else {
		put(out, c)
	}
	return out, y
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

// int8Chunk is the most products of int8 values whose float32 sum is
// exact in any order: every partial sum is an integer of magnitude at
// most 1024·128² = 2²⁴.
const int8Chunk = 1024

// Int8MatMulT returns a·bᵀ for int8 matrices a [m, k] and b [n, k] as
// float64 [m, n] holding the exact integer sums (an int8 tensor core's
// int32 ones, torch._int_mm's): k runs in chunks of int8Chunk, each a
// float32 GEMM whose sums are exact, and the chunks add in float64.
func Int8MatMulT(a, b *Tensor) *Tensor {
	if a.dtype != dtype.I8 || b.dtype != dtype.I8 || len(a.shape) != 2 || len(b.shape) != 2 || a.shape[1] != b.shape[1] {
		panic(fmt.Sprintf("tensor: Int8MatMulT needs int8 matrices [m, k] and [n, k], got %v and %v", a, b))
	}
	m, n, k := a.shape[0], b.shape[0], a.shape[1]
	if anyMeta(a, b) {
		return Meta(dtype.F64, m, n)
	}
	out := New(dtype.F64, m, n)
	a32, b32 := a.To(dtype.F32), b.To(dtype.F32)
	c, sums := scratch[float32](m*n), out.f64()
	for k0 := 0; k0 < k; k0 += int8Chunk {
		kc := min(int8Chunk, k-k0)
		gemm.F32(m, n, kc, operand(a32, k0, false), operand(b32, k0, true), 0, c, n)
		for i, v := range c {
			sums[i] += float64(v)
		}
	}
	release(c)
	Free(a32)
	Free(b32)
	return out
}

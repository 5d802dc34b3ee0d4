// Package gemm multiplies dense row-major matrices: C = op(A)·op(B) + beta·C.
//
// The algorithm is the Goto/BLIS one. C is computed in blocks of ncMax
// columns and k in steps of kcMax; each kc×nc block of op(B) is packed into
// panels of nr columns, each mc×kc block of op(A) into panels of mr rows,
// and a micro-kernel multiplies one A panel by one B panel into an mr×nr
// tile of C held in registers. Packing handles transposition and dequantizes
// low-precision operands (8-bit formats and 4-bit codebooks by table), so
// the kernel sees only contiguous float32 or float64 data, except that two
// BF16 operands are packed as pairs of bfloat16 for a kernel that
// multiplies them as they are with VDPBF16PS, or widened to float32 for a
// kernel that sums the same products in the same order (see BF16Path).
// Large products are split between goroutines
// by rows or columns of C. Small ones run on the calling goroutine and,
// when the kernel can read the operands where they lie, skip packing.
// Packing buffers are pooled, so calls allocate nothing once warm. An
// epilogue (bias, rounding to a low-precision output, GELU) runs on each
// panel of C as its last k step finishes, while it is in cache.
//
// The micro-kernels and packing routines are assembly where the CPU has
// AVX-512 (with VDPBF16PS for bfloat16 pairs where it has AVX512_BF16) or
// AVX2 and FMA, and Go elsewhere or when built with the noasm tag
// (stubs_amd64.go documents the assembly ones). Results are deterministic:
// every element of C is accumulated in the same order whatever GOMAXPROCS
// is and however the work is split, so a machine always gives the same
// result for the same call.
package gemm

import (
	"fmt"
	"unsafe"

	"github.com/weftml/weft/dtype"
)

// Matrix is a row-major operand stored in any float dtype, or as 4-bit codes
// of a codebook; GEMM dequantizes it to float32 while packing its panels, so
// low-precision storage costs little compute.
type Matrix struct {
	DType dtype.DType // F32, F16, BF16, any FP8, E2M1; zero with a Codebook
	Data  []byte      // little-endian storage of the stored (untransposed) matrix
	LD    int         // elements between consecutive stored rows
	Trans bool        // use the transpose of the stored matrix
	Scale float32     // every decoded element is multiplied by Scale; 0 means 1 (FP8 scaling)

	// Codebook, if not nil, makes Data 4-bit codes in blocks, as
	// bitsandbytes stores NF4 and FP4 weights: two codes a byte, the
	// earlier element in the high nibble, and stored element e (counted as
	// row·LD + column) stands for Codebook[code]·(Absmax[e/BlockSize]·Scale)
	// in float32 arithmetic.
	Codebook  *[16]float32
	Absmax    []float32 // the scale of each block
	BlockSize int       // elements to a block: 64 for bitsandbytes' weights
}

// F32 computes C = op(A)·op(B) + beta·C, op(A) m×k, op(B) k×n, C m×n row-major with leading dim ldc.
// Accumulation is float32. beta==0 means C is overwritten (never read, so NaNs in C do not leak).
func F32(m, n, k int, a, b Matrix, beta float32, c []float32, ldc int) {
	mul(&single, m, n, k, a.operand("A", m, k), b.operand("B", k, n), beta, c, ldc, Epilogue[float32]{})
}

// F32Epilogue is F32 with beta 0 followed by ep.
func F32Epilogue(m, n, k int, a, b Matrix, c []float32, ldc int, ep Epilogue[float32]) {
	mul(&single, m, n, k, a.operand("A", m, k), b.operand("B", k, n), 0, c, ldc, ep)
}

// Sgemm is F32 for float32 slices.
func Sgemm(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	mul(&single, m, n, k, fromSlice("A", a, lda, transA, m, k), fromSlice("B", b, ldb, transB, k, n), beta, c, ldc, Epilogue[float32]{})
}

// Dgemm is the float64 twin (float64 accumulation), used by float64 training which must match PyTorch to 1e-9.
func Dgemm(transA, transB bool, m, n, k int, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	DgemmEpilogue(transA, transB, m, n, k, a, lda, b, ldb, beta, c, ldc, Epilogue[float64]{})
}

// DgemmEpilogue is Dgemm followed by ep.
func DgemmEpilogue(transA, transB bool, m, n, k int, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int, ep Epilogue[float64]) {
	mul(&double, m, n, k, fromSlice("A", a, lda, transA, m, k), fromSlice("B", b, ldb, transB, k, n), beta, c, ldc, ep)
}

// Epilogue is what a product does to each element of C once its sum is
// complete, while the block of C it lies in is still in cache: first add
// Bias, then round into Out. It gives the same bits as a second pass over C
// would, without that pass's trips to memory.
type Epilogue[T float] struct {
	// Bias, if not nil, holds n values: Bias[j] is added to every
	// element of column j of C.
	Bias []T
	// Out, if not nil, receives C rounded to OutDType (to nearest even,
	// not saturating), element (i, j) at element i·n+j of Out; C still
	// holds the sums. OutDType takes a whole number of bytes an element.
	Out      []byte
	OutDType dtype.DType
	// GELU, if not nil (float32 sums only), receives the GELU (vec.GELU,
	// the exact erf form) of each element of C as a separate GELU would
	// read it, after the bias and as rounded into Out: element (i, j) at
	// element i·n+j, in OutDType (float32 without Out). C is then scratch.
	GELU []byte
	// Round, if a float dtype narrower than float32 (float32 sums only,
	// without Out), rounds C in place to the nearest value of Round (to
	// nearest even, not saturating) after the bias, as rounding into Round
	// and widening again would: a low-precision product in float32 storage.
	Round dtype.DType
}

// mul computes C = op(A)·op(B) + beta·C, then ep, once the operands are checked.
func mul[T float](ar *arith[T], m, n, k int, a, b operand[T], beta T, c []T, ldc int, ep Epilogue[T]) {
	if e := need("C", m, n, ldc); len(c) < e {
		panic(fmt.Sprintf("gemm: C has %d elements, want >= %d", len(c), e))
	}
	g := gemm[T]{m: m, n: n, k: k, a: a, bt: b.transpose(), beta: beta, c: c, ldc: ldc, kern: ar.kern, pk: &ar.pack,
		ep: newEpilogue(ep, m, n)}
	if ar.widen.fn != nil && a.bf16() && b.bf16() {
		g.kern, g.pairs = ar.widen, widenPairs
		if ar.bf16.fn != nil && bf16Dot() {
			g.kern, g.pairs = ar.bf16, dotPairs
		}
	}
	g.run(ar)
}

// need returns the elements a rows×cols matrix with leading dimension ld
// spans, panicking if a dimension is negative or ld is shorter than a row.
func need(name string, rows, cols, ld int) int {
	if rows < 0 || cols < 0 {
		panic(fmt.Sprintf("gemm: %s is %d×%d", name, rows, cols))
	}
	if ld < max(1, cols) {
		panic(fmt.Sprintf("gemm: leading dimension of %s is %d, want >= %d", name, ld, max(1, cols)))
	}
	if rows == 0 || cols == 0 {
		return 0
	}
	return (rows-1)*ld + cols
}

// stored returns the shape of the stored matrix whose op is rows×cols.
func stored(rows, cols int, trans bool) (int, int) {
	if trans {
		return cols, rows
	}
	return rows, cols
}

// fromSlice returns the operand for op(x), rows×cols, stored as elements of T.
func fromSlice[T float](name string, x []T, ld int, trans bool, rows, cols int) operand[T] {
	sr, sc := stored(rows, cols, trans)
	if e := need(name, sr, sc, ld); len(x) < e {
		panic(fmt.Sprintf("gemm: %s has %d elements, want >= %d", name, len(x), e))
	}
	return operand[T]{f: x, ld: ld, trans: trans, scale: 1}
}

// operand returns the operand for op(x), rows×cols. F32 data aligned for
// float32 is read in place; anything else is decoded while packing.
func (x Matrix) operand(name string, rows, cols int) operand[float32] {
	sr, sc := stored(rows, cols, x.Trans)
	n := need(name, sr, sc, x.LD)
	o := operand[float32]{ld: x.LD, trans: x.Trans, scale: x.Scale}
	if o.scale == 0 {
		o.scale = 1
	}
	if x.Codebook != nil {
		switch {
		case x.DType != dtype.Invalid:
			panic(fmt.Sprintf("gemm: %s has a codebook and dtype %v, want none", name, x.DType))
		case x.BlockSize <= 0:
			panic(fmt.Sprintf("gemm: %s has block size %d", name, x.BlockSize))
		case len(x.Data) < (n+1)/2:
			panic(fmt.Sprintf("gemm: %s has %d bytes of codes, want >= %d", name, len(x.Data), (n+1)/2))
		case len(x.Absmax) < (n+x.BlockSize-1)/x.BlockSize:
			panic(fmt.Sprintf("gemm: %s has %d block scales, want >= %d", name, len(x.Absmax), (n+x.BlockSize-1)/x.BlockSize))
		}
		o.enc, o.cb, o.absmax, o.block = x.Data, x.Codebook, x.Absmax, x.BlockSize
		return o
	}
	if !x.DType.IsFloat() {
		panic(fmt.Sprintf("gemm: %s has dtype %v, want a float format", name, x.DType))
	}
	if e := x.DType.StorageBytes(n); len(x.Data) < e {
		panic(fmt.Sprintf("gemm: %s has %d bytes of %v, want >= %d", name, len(x.Data), x.DType, e))
	}
	p := unsafe.SliceData(x.Data)
	if x.DType == dtype.F32 && uintptr(unsafe.Pointer(p))%unsafe.Alignof(float32(0)) == 0 {
		o.f = unsafe.Slice((*float32)(unsafe.Pointer(p)), len(x.Data)/4)
	} else {
		o.enc, o.dt, o.lut = x.Data, x.DType, luts[x.DType]
	}
	return o
}

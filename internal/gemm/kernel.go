package gemm

import (
	"math"
	"unsafe"
)

// A kernel is a micro-kernel and the mr×nr register tile it computes. fn
// adds the product of packed panels to the top-left h×w part of the mr×nr
// tile of c with row stride ldc, 1 <= h <= mr, 1 <= w <= nr, or with add
// false stores it there without reading c, touching no other element of c
// either way: a holds an mr×kc panel of op(A) with
// a[p*mr+i] = op(A)[i][p], b a kc×nr panel of op(B) with
// b[p*nr+j] = op(B)[p][j], kc >= 1. The packing routines lay out op(A) in
// panels of mr rows and op(B) in panels of nr columns to match.
//
// Every kernel sums each element's products in order of p from zero,
// rounding after each step (the assembly kernels fuse each multiply with
// its add; the Go one leaves that to the compiler), and adds the sum to c
// or stores it once, so a tile's result does not depend on where the tile
// lies in C or on how much of it is used.
//
// Storing is for the first k step with beta 0, so that no pass clears C
// first. It gives sum where adding to a cleared C gave +0 + sum, which
// differ only when sum is -0 (a fused step that underflows, say): that is
// what BLAS stores with beta 0 too, it compares equal to +0, and a result
// it goes into can differ only in the sign of a zero.
type kernel[T float] struct {
	mr, nr int
	fn     func(kc int, a, b, c []T, ldc, h, w int, add bool)

	// strided, if not nil, is fn reading op(A)[i][p] = a[i*rsa+p*csa] and
	// op(B)[p][j] = b[p*rsb+j*csb] wherever they lie, with the same
	// result: small products then skip packing.
	strided func(kc int, a []T, rsa, csa int, b []T, rsb, csb int, c []T, ldc int, add bool)
}

// An impl is the set of micro-kernels and packing routines for one
// instruction set.
type impl struct {
	name string
	f32  kernel[float32]
	f64  kernel[float64]

	// pack packs float32 operands and pairs of bfloat16.
	pack packer

	// bf16 multiplies operands that are both bfloat16 with VDPBF16PS (the
	// "dot" path), or has a nil fn if the instruction set cannot. Its
	// panels hold pairs of bfloat16 in the bits of each float32: for A, the
	// low and high halves of a[q*mr+i] are op(A)[i][2q] and op(A)[i][2q+1],
	// and likewise for B, so that kc counts pairs.
	bf16 kernel[float32]

	// widen multiplies the same operands widened to float32 while packing
	// (the "widen" path), with the same result as bf16: each pair is
	// packed high element first, as two k steps, and the kernel is f32's
	// with VDPBF16PS's denormal handling (see fmaDAZ). Every impl has it.
	widen kernel[float32]
}

// Tile of the Go kernel, bounded by the 15 float registers the Go compiler
// allocates on amd64: eight accumulators, four values of A and two of B.
const goMR, goNR = 4, 2

// goImpl is the portable implementation, available everywhere.
var goImpl = impl{
	name: "go",
	f32:  kernel[float32]{mr: goMR, nr: goNR, fn: kernelGoPacked[float32], strided: kernelGo[float32]},
	f64:  kernel[float64]{mr: goMR, nr: goNR, fn: kernelGoPacked[float64], strided: kernelGo[float64]},
	pack: packer{transpose: transposeGo[uint32], lookup: lookupGo, widen: widenGo, interleave: interleaveGo, codes: codesGo,
		split: splitGo},
	widen: kernel[float32]{mr: goMR, nr: goNR, fn: kernelGoDAZ},
}

// kernelGoDAZ is kernel.fn for the widen path in Go: the loop of the
// assembly kernels (see stubs_amd64.go) with fmaDAZ for fma. The float64
// arithmetic of fmaDAZ is too slow for the unrolled kernelGo to help.
func kernelGoDAZ(kc int, a, b, c []float32, ldc, h, w int, add bool) {
	_, _ = a[kc*goMR-1], b[kc*goNR-1]
	for i := range h {
		for j := range w {
			var s float32
			for p := range kc {
				s = fmaDAZ(a[p*goMR+i], b[p*goNR+j], s)
			}
			if add {
				s += c[i*ldc+j]
			}
			c[i*ldc+j] = s
		}
	}
}

// fmaDAZ returns x·y+s rounded once to float32, as each step of VDPBF16PS
// computes it, for x and y whose products are exact in float64 (bfloat16
// values, say): denormal inputs count as zeros of their sign (DAZ), and a
// result that is below the smallest normal once rounded to 24 bits, as if
// the exponent were unbounded, is a zero of its sign (FTZ, tininess after
// rounding, as the instruction and MXCSR.FTZ detect it). The rounding of
// v, the exact sum in float64, to float32 rounds only once in effect: a
// sum of two values of at most 24 bits needs no more than 53 for that.
func fmaDAZ(x, y, s float32) float32 {
	v := float64(daz(x))*float64(daz(y)) + float64(daz(s))
	if a := math.Abs(v); a < 0x1p-126 {
		if float32(a*0x1p64) < 0x1p-62 { // scaled into float32's normal range
			return float32(math.Copysign(0, v))
		}
		return float32(math.Copysign(0x1p-126, v)) // rounded up to the smallest normal
	}
	return float32(v)
}

// daz returns x, or a zero of its sign if x is denormal.
func daz(x float32) float32 {
	if b := math.Float32bits(x); b&0x7f800000 == 0 {
		return math.Float32frombits(b & 0x80000000)
	}
	return x
}

// kernelGoPacked is kernel.fn for kernelGo: a ragged tile goes through a
// whole one on the stack.
func kernelGoPacked[T float](kc int, a, b, c []T, ldc, h, w int, add bool) {
	if h == goMR && w == goNR {
		kernelGo(kc, a, 1, goMR, b, goNR, 1, c, ldc, add)
		return
	}
	var t [goMR * goNR]T
	kernelGo(kc, a, 1, goMR, b, goNR, 1, t[:], goNR, false)
	for i := range h {
		row := c[i*ldc:][:w]
		if !add {
			copy(row, t[i*goNR:])
			continue
		}
		for j := range row {
			row[j] += t[i*goNR+j]
		}
	}
}

// impls are the implementations this machine runs, best first: the
// assembly ones its CPU supports, then goImpl.
var impls = append(asmImpls(), goImpl)

// use makes GEMM run the kernels of im; the package starts with impls[0],
// and tests switch to each of impls in turn.
func use(im *impl) {
	single.kern, single.bf16, single.widen, single.pack = im.f32, im.bf16, im.widen, im.pack
	double.kern, double.pack = im.f64, packer{transpose: transposeGo[uint64]}
}

func init() {
	use(&impls[0])
	setBF16FromEnv()
}

// kernelGo adds op(A)·op(B) to the goMR×goNR tile of c with row stride ldc,
// or with add false stores it there without reading c, where op(A)[i][p] = a[i*rsa+p*csa] and op(B)[p][j] = b[p*rsb+j*csb],
// 0 <= p < kc, for kc >= 1 and non-negative strides: it reads packed panels
// and, for small products, matrices where they are stored.
//
// The loads are unchecked (the bounds are checked once up front) and the
// loop is unrolled four times with its test at the bottom, so that its body
// is a single basic block: the compiler then issues each multiply next to
// its add and keeps every accumulator in a register.
func kernelGo[T float](kc int, a []T, rsa, csa int, b []T, rsb, csb int, c []T, ldc int, add bool) {
	const mr, nr = goMR, goNR
	_ = a[(kc-1)*csa+(mr-1)*rsa]
	_ = b[(kc-1)*rsb+(nr-1)*csb]
	var c00, c01, c10, c11, c20, c21, c30, c31 T
	sz := unsafe.Sizeof(c00)
	pa, pb := unsafe.Pointer(unsafe.SliceData(a)), unsafe.Pointer(unsafe.SliceData(b))
	ra1, ra2, ra3 := uintptr(rsa)*sz, uintptr(2*rsa)*sz, uintptr(3*rsa)*sz
	cb1 := uintptr(csb) * sz
	da, db := uintptr(csa)*sz, uintptr(rsb)*sz
	p := 0
	if kc >= 4 {
		for {
			qa, qb := unsafe.Add(pa, uintptr(p)*da), unsafe.Add(pb, uintptr(p)*db)
			a0, a1, a2, a3 := *(*T)(qa), *(*T)(unsafe.Add(qa, ra1)), *(*T)(unsafe.Add(qa, ra2)), *(*T)(unsafe.Add(qa, ra3))
			b0, b1 := *(*T)(qb), *(*T)(unsafe.Add(qb, cb1))
			c00 += a0 * b0
			c01 += a0 * b1
			c10 += a1 * b0
			c11 += a1 * b1
			c20 += a2 * b0
			c21 += a2 * b1
			c30 += a3 * b0
			c31 += a3 * b1
			qa, qb = unsafe.Add(pa, uintptr(p+1)*da), unsafe.Add(pb, uintptr(p+1)*db)
			a0, a1, a2, a3 = *(*T)(qa), *(*T)(unsafe.Add(qa, ra1)), *(*T)(unsafe.Add(qa, ra2)), *(*T)(unsafe.Add(qa, ra3))
			b0, b1 = *(*T)(qb), *(*T)(unsafe.Add(qb, cb1))
			c00 += a0 * b0
			c01 += a0 * b1
			c10 += a1 * b0
			c11 += a1 * b1
			c20 += a2 * b0
			c21 += a2 * b1
			c30 += a3 * b0
			c31 += a3 * b1
			qa, qb = unsafe.Add(pa, uintptr(p+2)*da), unsafe.Add(pb, uintptr(p+2)*db)
			a0, a1, a2, a3 = *(*T)(qa), *(*T)(unsafe.Add(qa, ra1)), *(*T)(unsafe.Add(qa, ra2)), *(*T)(unsafe.Add(qa, ra3))
			b0, b1 = *(*T)(qb), *(*T)(unsafe.Add(qb, cb1))
			c00 += a0 * b0
			c01 += a0 * b1
			c10 += a1 * b0
			c11 += a1 * b1
			c20 += a2 * b0
			c21 += a2 * b1
			c30 += a3 * b0
			c31 += a3 * b1
			qa, qb = unsafe.Add(pa, uintptr(p+3)*da), unsafe.Add(pb, uintptr(p+3)*db)
			a0, a1, a2, a3 = *(*T)(qa), *(*T)(unsafe.Add(qa, ra1)), *(*T)(unsafe.Add(qa, ra2)), *(*T)(unsafe.Add(qa, ra3))
			b0, b1 = *(*T)(qb), *(*T)(unsafe.Add(qb, cb1))
			c00 += a0 * b0
			c01 += a0 * b1
			c10 += a1 * b0
			c11 += a1 * b1
			c20 += a2 * b0
			c21 += a2 * b1
			c30 += a3 * b0
			c31 += a3 * b1
			if p += 4; p > kc-4 {
				break
			}
		}
	}
	if p < kc {
		for {
			qa, qb := unsafe.Add(pa, uintptr(p)*da), unsafe.Add(pb, uintptr(p)*db)
			a0, a1, a2, a3 := *(*T)(qa), *(*T)(unsafe.Add(qa, ra1)), *(*T)(unsafe.Add(qa, ra2)), *(*T)(unsafe.Add(qa, ra3))
			b0, b1 := *(*T)(qb), *(*T)(unsafe.Add(qb, cb1))
			c00 += a0 * b0
			c01 += a0 * b1
			c10 += a1 * b0
			c11 += a1 * b1
			c20 += a2 * b0
			c21 += a2 * b1
			c30 += a3 * b0
			c31 += a3 * b1
			if p++; p == kc {
				break
			}
		}
	}
	c0, c1, c2, c3 := c[:nr], c[ldc:ldc+nr], c[2*ldc:2*ldc+nr], c[3*ldc:3*ldc+nr]
	if add {
		c00, c01 = c0[0]+c00, c0[1]+c01
		c10, c11 = c1[0]+c10, c1[1]+c11
		c20, c21 = c2[0]+c20, c2[1]+c21
		c30, c31 = c3[0]+c30, c3[1]+c31
	}
	c0[0], c0[1] = c00, c01
	c1[0], c1[1] = c10, c11
	c2[0], c2[1] = c20, c21
	c3[0], c3[1] = c30, c31
}

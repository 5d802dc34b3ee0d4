package gemm

import "unsafe"

// mr×nr is the register tile of the micro-kernels: the packing routines lay
// out op(A) in panels of mr rows and op(B) in panels of nr columns. The
// portable kernel is limited by amd64's 15 allocatable float registers: eight
// accumulators, four values of A and two of B.
const mr, nr = 4, 2

// kernel32 and kernel64 are the micro-kernels the driver calls. An assembly
// kernel takes the place of one by moving its declaration to a file built for
// that architecture.
func kernel32(kc int, a, b, c []float32, ldc int) { kernelGo(kc, a, b, c, ldc) }
func kernel64(kc int, a, b, c []float64, ldc int) { kernelGo(kc, a, b, c, ldc) }

// kernelGo adds the product of an mr×kc panel of A and a kc×nr panel of B to
// the mr×nr tile of c with row stride ldc, for kc >= 1. The panels are packed
// k step by k step: a[p*mr+i] is op(A)[i][p] and b[p*nr+j] is op(B)[p][j].
// Each sum runs over p in order from zero and is added to c once, so a tile's
// result does not depend on where the tile lies.
//
// The loop body is unrolled four times with unchecked loads so that it is one
// basic block: the compiler then interleaves each multiply with its add and
// keeps every accumulator in a register.
func kernelGo[T float](kc int, a, b, c []T, ldc int) {
	_ = a[mr*kc-1]
	_ = b[nr*kc-1]
	pa := unsafe.Pointer(unsafe.SliceData(a))
	pb := unsafe.Pointer(unsafe.SliceData(b))
	var c00, c01, c10, c11, c20, c21, c30, c31 T
	sz := unsafe.Sizeof(c00)
	p := 0
	if kc >= 4 {
		for { // testing at the bottom keeps the body one block
			av := (*[4 * mr]T)(unsafe.Add(pa, uintptr(p*mr)*sz))
			bv := (*[4 * nr]T)(unsafe.Add(pb, uintptr(p*nr)*sz))
			a0, a1, a2, a3 := av[0], av[1], av[2], av[3]
			b0, b1 := bv[0], bv[1]
			c00 += a0 * b0
			c01 += a0 * b1
			c10 += a1 * b0
			c11 += a1 * b1
			c20 += a2 * b0
			c21 += a2 * b1
			c30 += a3 * b0
			c31 += a3 * b1
			a0, a1, a2, a3 = av[4], av[5], av[6], av[7]
			b0, b1 = bv[2], bv[3]
			c00 += a0 * b0
			c01 += a0 * b1
			c10 += a1 * b0
			c11 += a1 * b1
			c20 += a2 * b0
			c21 += a2 * b1
			c30 += a3 * b0
			c31 += a3 * b1
			a0, a1, a2, a3 = av[8], av[9], av[10], av[11]
			b0, b1 = bv[4], bv[5]
			c00 += a0 * b0
			c01 += a0 * b1
			c10 += a1 * b0
			c11 += a1 * b1
			c20 += a2 * b0
			c21 += a2 * b1
			c30 += a3 * b0
			c31 += a3 * b1
			a0, a1, a2, a3 = av[12], av[13], av[14], av[15]
			b0, b1 = bv[6], bv[7]
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
	for ; p < kc; p++ {
		av := (*[mr]T)(unsafe.Add(pa, uintptr(p*mr)*sz))
		bv := (*[nr]T)(unsafe.Add(pb, uintptr(p*nr)*sz))
		a0, a1, a2, a3 := av[0], av[1], av[2], av[3]
		b0, b1 := bv[0], bv[1]
		c00 += a0 * b0
		c01 += a0 * b1
		c10 += a1 * b0
		c11 += a1 * b1
		c20 += a2 * b0
		c21 += a2 * b1
		c30 += a3 * b0
		c31 += a3 * b1
	}
	c0 := c[:nr]
	c0[0] += c00
	c0[1] += c01
	c1 := c[ldc : ldc+nr]
	c1[0] += c10
	c1[1] += c11
	c2 := c[2*ldc : 2*ldc+nr]
	c2[0] += c20
	c2[1] += c21
	c3 := c[3*ldc : 3*ldc+nr]
	c3[0] += c30
	c3[1] += c31
}

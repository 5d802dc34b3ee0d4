package gemm

import "unsafe"

// mr×nr is the register tile of the micro-kernel: the packing routines lay
// out op(A) in panels of mr rows and op(B) in panels of nr columns. The
// portable kernel is bounded by the 15 float registers the Go compiler
// allocates on amd64: eight accumulators, four values of A and two of B.
const mr, nr = 4, 2

// kernel32 and kernel64 add the product of packed panels to the mr×nr tile
// of c with row stride ldc: a holds an mr×kc panel of op(A) with
// a[p*mr+i] = op(A)[i][p], b a kc×nr panel of op(B) with
// b[p*nr+j] = op(B)[p][j], kc >= 1. The driver calls them for every tile of
// a packed block; an assembly kernel takes the place of one by moving its
// declaration to a file built for its architecture, kernelGo remaining the
// portable twin.
func kernel32(kc int, a, b, c []float32, ldc int) { kernelGo(kc, a, 1, mr, b, nr, 1, c, ldc) }
func kernel64(kc int, a, b, c []float64, ldc int) { kernelGo(kc, a, 1, mr, b, nr, 1, c, ldc) }

// kernelGo adds op(A)·op(B) to the mr×nr tile of c with row stride ldc, where
// op(A)[i][p] = a[i*rsa+p*csa] and op(B)[p][j] = b[p*rsb+j*csb], 0 <= p < kc,
// for kc >= 1 and non-negative strides: it reads packed panels and, for
// small products, matrices where they are stored.
// Each element's products are summed in order of p from zero and the sum is
// added to c once, so a tile's result does not depend on the strides or on
// where the tile lies in C.
//
// The loads are unchecked (the bounds are checked once up front) and the
// loop is unrolled four times with its test at the bottom, so that its body
// is a single basic block: the compiler then issues each multiply next to
// its add and keeps every accumulator in a register.
func kernelGo[T float](kc int, a []T, rsa, csa int, b []T, rsb, csb int, c []T, ldc int) {
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

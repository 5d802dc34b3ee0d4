//go:build !noasm

package gemm

import "golang.org/x/sys/cpu"

// asmImpls returns the assembly implementations the CPU supports, best first.
func asmImpls() []impl {
	var s []impl
	if cpu.X86.HasAVX512F {
		avx512 := impl{
			name: "avx512",
			f32:  kernel[float32]{mr: 12, nr: 32, fn: sgemmAVX512},
			f64:  kernel[float64]{mr: 12, nr: 16, fn: dgemmAVX512},
			pack: packer{transpose: transposeAVX, lookup: lookupAVX512, widen: widenAVX2, interleave: interleaveAVX2, codes: codesAVX512,
				split: splitAVX512},
			widen: kernel[float32]{mr: 12, nr: 32, fn: sgemmFTZAVX512},
		}
		if cpu.X86.HasAVX512BF16 {
			avx512.bf16 = kernel[float32]{mr: 12, nr: 32, fn: bf16gemmAVX512}
		}
		s = append(s, avx512)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		s = append(s, impl{
			name:  "avx2",
			f32:   kernel[float32]{mr: 6, nr: 16, fn: sgemmAVX2},
			f64:   kernel[float64]{mr: 6, nr: 8, fn: dgemmAVX2},
			pack:  packAVX2,
			widen: kernel[float32]{mr: 6, nr: 16, fn: sgemmFTZAVX2},
		})
	}
	return s
}

// The assembly kernels are kernel.fn for their tiles, mr×nr:
//
//	for i := range h {
//		for j := range w {
//			var s T
//			for p := range kc {
//				s = fma(a[p*mr+i], b[p*nr+j], s)
//			}
//			if add {
//				s += c[i*ldc+j]
//			}
//			c[i*ldc+j] = s
//		}
//	}
//
// where fma(x, y, s) is x·y+s rounded once. They read and write no other
// elements of c, read none with add false, and need kc >= 1.

// sgemmAVX512 is the 12×32 float32 kernel: 24 zmm accumulators.
//
//go:noescape
func sgemmAVX512(kc int, a, b, c []float32, ldc, h, w int, add bool)

// dgemmAVX512 is the 12×16 float64 kernel: 24 zmm accumulators.
//
//go:noescape
func dgemmAVX512(kc int, a, b, c []float64, ldc, h, w int, add bool)

// sgemmAVX2 is the 6×16 float32 kernel: 12 ymm accumulators.
//
//go:noescape
func sgemmAVX2(kc int, a, b, c []float32, ldc, h, w int, add bool)

// dgemmAVX2 is the 6×8 float64 kernel: 12 ymm accumulators.
//
//go:noescape
func dgemmAVX2(kc int, a, b, c []float64, ldc, h, w int, add bool)

// sgemmFTZAVX512 and sgemmFTZAVX2 are the float32 kernels with MXCSR's DAZ
// and FTZ bits set for their k steps, so that each step is fmaDAZ, as
// VDPBF16PS computes it: they are impl.widen.
//
//go:noescape
func sgemmFTZAVX512(kc int, a, b, c []float32, ldc, h, w int, add bool)

//go:noescape
func sgemmFTZAVX2(kc int, a, b, c []float32, ldc, h, w int, add bool)

// bf16gemmAVX512 is the 12×32 bfloat16 kernel, with VDPBF16PS in place of
// the multiply-adds: a and b hold pairs of bfloat16 (see impl.bf16), and
// each step adds the pair's products odd element first:
//
//	for i := range h {
//		for j := range w {
//			var s float32
//			for q := range kc {
//				x, y := a[q*12+i], b[q*32+j]
//				s = fmaDAZ(hi(x), hi(y), s)
//				s = fmaDAZ(lo(x), lo(y), s)
//			}
//			if add {
//				s += c[i*ldc+j]
//			}
//			c[i*ldc+j] = s
//		}
//	}
//
// where lo and hi widen the low and high bfloat16 of a pair to float32 (so
// that each product is exact) and fmaDAZ is the instruction's fused step,
// which treats denormal inputs and results as zeros. Intel documents this
// order ("VDPBF16PS operation": the odd elements' product, then the even
// ones', each an FMA with DAZ in and FTZ out); Zen 5 follows it bit for
// bit, tininess after rounding included (TestBF16Corners).
//
//go:noescape
func bf16gemmAVX512(kc int, a, b, c []float32, ldc, h, w int, add bool)

// packAVX2 packs with AVX2 instructions, and 4-bit codes and splits in Go.
var packAVX2 = packer{transpose: transposeAVX, lookup: lookupAVX2, widen: widenAVX2, interleave: interleaveAVX2, codes: codesGo,
	split: splitGo}

// transposeAVX is the transposer for 32-bit words with AVX: eight rows and
// then four at a time in assembly, and the rows left in Go.
func transposeAVX(h, n int, src []byte, lds int, dst []byte, ldd int) {
	_ = src[(h-1)*lds+4*n-1]
	_ = dst[(n-1)*ldd+4*h-1]
	i := 0
	for ; i+8 <= h; i += 8 {
		transpose8AVX(n, src[i*lds:], lds, dst[4*i:], ldd)
	}
	for ; i+4 <= h; i += 4 {
		transpose4AVX(n, src[i*lds:], lds, dst[4*i:], ldd)
	}
	if i < h {
		transposeGo[uint32](h-i, n, src[i*lds:], lds, dst[4*i:], ldd)
	}
}

// transpose8AVX and transpose4AVX are the transposer for 32-bit words and
// h = 8 or 4 rows, with no bounds checks:
//
//	for i := range h {
//		for p := range n {
//			dst[p*ldd+4*i:][:4] = src[i*lds+4*p:][:4]
//		}
//	}
//
//go:noescape
func transpose8AVX(n int, src []byte, lds int, dst []byte, ldd int)

//go:noescape
func transpose4AVX(n int, src []byte, lds int, dst []byte, ldd int)

// lookupAVX2 and lookupAVX512 are packer.lookup, eight codes at a time with
// VPGATHERDD, or sixteen with VPERMI2PS (twice as fast on Zen 5):
//
//	for i := range dst {
//		dst[i] = lut[src[i]] * s
//	}
//
//go:noescape
func lookupAVX2(dst []float32, src []byte, lut *[256]float32, s float32)

//go:noescape
func lookupAVX512(dst []float32, src []byte, lut *[256]float32, s float32)

// widenAVX2 is packer.widen, eight at a time:
//
//	for i := range dst {
//		dst[i] = math.Float32frombits(uint32(src[2*i])<<16|uint32(src[2*i+1])<<24) * s
//	}
//
//go:noescape
func widenAVX2(dst []float32, src []byte, s float32)

// interleaveAVX2 is packer.interleave, sixteen pairs at a time:
//
//	for i := range dst {
//		dst[i] = uint32(lo[2*i]) | uint32(lo[2*i+1])<<8 | uint32(hi[2*i])<<16 | uint32(hi[2*i+1])<<24
//	}
//
//go:noescape
func interleaveAVX2(dst []uint32, lo, hi []byte)

// splitAVX512 is packer.split, sixteen pairs at a time:
//
//	for q := 0; q < len(src); q += w {
//		for i := range w {
//			dst[2*q+i] = math.Float32frombits(src[q+i] &^ 0xffff)
//			dst[2*q+w+i] = math.Float32frombits(src[q+i] << 16)
//		}
//	}
//
//go:noescape
func splitAVX512(dst []float32, src []uint32, w int)

// codesAVX512 is packer.codes with codes16AVX512 for the whole groups of
// sixteen codes that start at a byte.
func codesAVX512(dst []float32, src []byte, e int, cb *[16]float32, s float32) {
	i := min(e&1, len(dst)) // a leading low nibble
	codesGo(dst[:i], src, e, cb, s)
	if n := (len(dst) - i) &^ 15; n > 0 {
		codes16AVX512(dst[i:i+n], src[(e+i)/2:(e+i+n)/2], cb, s)
		i += n
	}
	codesGo(dst[i:], src, e+i, cb, s)
}

// codes16AVX512 is packer.codes for e = 0 and a multiple of 16 codes,
// looked up with VPERMPS:
//
//	for i := range dst {
//		dst[i] = cb[src[i/2]>>(4-4*(i&1))&15] * s
//	}
//
//go:noescape
func codes16AVX512(dst []float32, src []byte, cb *[16]float32, s float32)

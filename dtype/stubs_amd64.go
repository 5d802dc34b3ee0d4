//go:build !noasm

package dtype

import "golang.org/x/sys/cpu"

// useAVX512 reports whether the bfloat16 kernels can run: they need only
// AVX-512F (and x/sys/cpu checks that the OS saves the Z registers).
var useAVX512 = cpu.X86.HasAVX512F

// encodeBF16AVX512 is encodeBF16 for the first len(src)&^15 elements, the
// rest being the caller's, and needs len(dst) >= len(src):
//
//	for i, x := range src[:len(src)&^15] {
//		dst[i] = BF16FromF32(clamp(x, lim))
//	}
//
//go:noescape
func encodeBF16AVX512(dst []uint16, src []float32, lim float32)

// decodeBF16AVX512 is decodeBF16 for the first len(src)&^15 elements, the
// rest being the caller's, and needs len(dst) >= len(src):
//
//	for i, b := range src[:len(src)&^15] {
//		dst[i] = F32FromBF16(b)
//	}
//
//go:noescape
func decodeBF16AVX512(dst []float32, src []uint16)

//go:build !noasm

package dtype

// roundBF16AVX512 is roundBF16 for the first len(xs)&^15 elements, the rest
// being the caller's:
//
//	for i, x := range xs[:len(xs)&^15] {
//		xs[i] = F32FromBF16(BF16FromF32(x))
//	}
//
//go:noescape
func roundBF16AVX512(xs []float32)

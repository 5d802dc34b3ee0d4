//go:build !noasm

package dtype

// encodeF16AVX512 is encodeF16 for the first len(src)&^15 elements, the
// rest being the caller's, and needs len(dst) >= len(src):
//
//	for i, x := range src[:len(src)&^15] {
//		dst[i] = toF16(clamp(x, lim))
//	}
//
//go:noescape
func encodeF16AVX512(dst []uint16, src []float32, lim float32)

// decodeF16AVX512 is decodeF16 for the first len(src)&^15 elements, the
// rest being the caller's, and needs len(dst) >= len(src):
//
//	for i, h := range src[:len(src)&^15] {
//		dst[i] = fromF16(h)
//	}
//
//go:noescape
func decodeF16AVX512(dst []float32, src []uint16)

package dtype

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// nativeLE reports whether this machine stores numbers little-endian, as
// tensor storage does: then float32 and float64 storage is the machine's own
// representation and copies need no per-element conversion.
var nativeLE = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// asBytes views a float slice as its bytes.
func asBytes[T float32 | float64](s []T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(T(0))))
}

// asHalves views n 16-bit codes of storage b (bf16, f16) as the machine's
// uint16s: on a little-endian machine no byte shuffling is needed.
func asHalves(b []byte, n int) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// encodeBF16 rounds src to bfloat16 codes, clamping to ±lim first (+Inf:
// no clamp), in one pass without per-byte bounds checks; with AVX-512,
// sixteen at a time.
func encodeBF16(dst []uint16, src []float32, lim float32) {
	dst = dst[:len(src)]
	if useAVX512 {
		n := len(src) &^ 15
		encodeBF16AVX512(dst, src, lim)
		dst, src = dst[n:], src[n:]
	}
	if lim > math.MaxFloat32 { // no clamp
		for i, x := range src {
			dst[i] = BF16FromF32(x)
		}
		return
	}
	for i, x := range src {
		dst[i] = BF16FromF32(clamp(x, lim))
	}
}

// decodeBF16 widens bfloat16 codes to float32, exactly; with AVX-512,
// sixteen at a time.
func decodeBF16(dst []float32, src []uint16) {
	src = src[:len(dst)]
	if useAVX512 {
		n := len(dst) &^ 15
		decodeBF16AVX512(dst, src)
		dst, src = dst[n:], src[n:]
	}
	for i, b := range src {
		dst[i] = F32FromBF16(b)
	}
}

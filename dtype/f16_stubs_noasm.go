//go:build !amd64 || noasm

package dtype

// The stubs only satisfy the compiler: useAVX512 is false in this build.

func encodeF16AVX512(dst []uint16, src []float32, lim float32) {
	panic("dtype: no assembly in this build")
}

func decodeF16AVX512(dst []float32, src []uint16) {
	panic("dtype: no assembly in this build")
}

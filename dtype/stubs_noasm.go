//go:build !amd64 || noasm

package dtype

// useAVX512 is false: this build has no assembly kernels, and the stubs
// below only satisfy the compiler.
const useAVX512 = false

func encodeBF16AVX512(dst []uint16, src []float32, lim float32) {
	panic("dtype: no assembly in this build")
}

func decodeBF16AVX512(dst []float32, src []uint16) {
	panic("dtype: no assembly in this build")
}

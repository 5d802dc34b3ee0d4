//go:build !amd64 || noasm

package dtype

func roundBF16AVX512(xs []float32) {
	panic("dtype: no assembly in this build")
}

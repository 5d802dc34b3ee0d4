//go:build !amd64 || noasm

package vec

// The stub below only satisfies the compiler: useAVX512 is false in this
// build.

func adamWBF16AVX512(p, g, m, v []float32, s AdamWParams, roundP, roundM, roundV bool) {
	panic("vec: no assembly in this build")
}

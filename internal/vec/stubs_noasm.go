//go:build !amd64 || noasm

package vec

// useAVX512 is false: this build has no assembly kernels, and the stub
// below only satisfies the compiler.
const useAVX512 = false

func adamWAVX512(p, g, m, v []float32, s AdamWParams) {
	panic("vec: no assembly in this build")
}

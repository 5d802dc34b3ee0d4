//go:build !amd64 || noasm

package vec

// useAVX512 is false: this build has no assembly kernels, and the stub
// below only satisfies the compiler.
const useAVX512 = false

func adamWAVX512(p, g, m, v []float32, s AdamWParams) {
	panic("vec: no assembly in this build")
}

func reluAVX512(y, x []float32) { panic("vec: no assembly in this build") }

func reluBackwardAVX512(dx, y, dy []float32) { panic("vec: no assembly in this build") }

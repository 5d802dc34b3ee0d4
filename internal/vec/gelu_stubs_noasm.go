//go:build !amd64 || noasm

package vec

// The stubs below only satisfy the compiler: useAVX512 is false in this
// build.

func geluAVX512(y, cdf, x []float32) {
	panic("vec: no assembly in this build")
}

func geluBackwardAVX512(dx, x, cdf, dy []float32) {
	panic("vec: no assembly in this build")
}

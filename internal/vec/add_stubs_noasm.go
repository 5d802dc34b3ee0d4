//go:build !amd64 || noasm

package vec

// The stub below only satisfies the compiler: useAVX512 is false in this
// build.

func addAVX512(dst, x []float32) { panic("vec: no assembly in this build") }

//go:build !amd64 || noasm

package vec

// The stub below only satisfies the compiler: useAVX512 is false in this
// build.

func expAVX512(dst, src []float32) int {
	panic("vec: no assembly in this build")
}

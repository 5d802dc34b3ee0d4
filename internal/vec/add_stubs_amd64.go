//go:build !noasm

package vec

// addAVX512 is addGo for len(dst), a multiple of sixteen; len(x) >=
// len(dst).
//
//go:noescape
func addAVX512(dst, x []float32)

//go:build !noasm

package vec

import "golang.org/x/sys/cpu"

// useAVX512 reports whether the AVX-512 kernels can run: they need only
// AVX-512F (and x/sys/cpu checks that the OS saves the Z registers).
var useAVX512 = cpu.X86.HasAVX512F

// adamWAVX512 is adamWGo for the first len(p)&^15 elements, the rest being
// the caller's, and needs len(g), len(m), len(v) >= len(p).
//
//go:noescape
func adamWAVX512(p, g, m, v []float32, s AdamWParams)

// reluAVX512 is reluGo for len(x), a multiple of sixteen; len(y) >= len(x).
//
//go:noescape
func reluAVX512(y, x []float32)

// reluBackwardAVX512 is reluBackwardGo for len(y), a multiple of sixteen;
// dx and dy have at least len(y) elements.
//
//go:noescape
func reluBackwardAVX512(dx, y, dy []float32)

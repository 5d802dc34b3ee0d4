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

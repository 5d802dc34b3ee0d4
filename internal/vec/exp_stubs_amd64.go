//go:build !noasm

package vec

// expAVX512 is expGo for the first len(dst)&^7 elements but that it stops
// before the first block of eight with a lane whose rounding it cannot
// vouch for; it returns the number of elements it set, and needs len(src)
// >= len(dst).
//
//go:noescape
func expAVX512(dst, src []float32) int

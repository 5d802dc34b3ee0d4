// Package philox is the Philox4x32-10 counter-based generator of Salmon et
// al., "Parallel Random Numbers: As Easy as 1, 2, 3" (SC 2011), which
// PyTorch uses on GPUs: a block of four random words is a pure function of
// a 128-bit counter and a 64-bit key, so any block can be drawn without
// drawing the ones before it.
package philox

import "math/bits"

const (
	m0, m1 = 0xD2511F53, 0xCD9E8D57 // round multipliers
	w0, w1 = 0x9E3779B9, 0xBB67AE85 // key schedule: golden ratio, sqrt(3)-1
)

// Block returns the 10-round Philox4x32 block of counter ctr under key.
func Block(ctr [4]uint32, key [2]uint32) [4]uint32 {
	c, k := ctr, key
	for r := range 10 {
		if r > 0 {
			k[0] += w0
			k[1] += w1
		}
		hi0, lo0 := bits.Mul32(m0, c[0])
		hi1, lo1 := bits.Mul32(m1, c[2])
		c = [4]uint32{hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0}
	}
	return c
}

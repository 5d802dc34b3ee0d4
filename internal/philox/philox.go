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

// Uint16s fills dst with the 16-bit words first, first+1, ... of the
// stream (key, stream): word i is half i%2 (the low 16 bits first) of
// word i/2%4 of Block([i/8 low, i/8 high, stream[0], stream[1]], key).
// Any part of the stream is drawn without the words before it, so that
// ranks holding chunks of a tensor draw the words a whole one would.
func Uint16s(dst []uint16, key, stream [2]uint32, first uint64) {
	var block [4]uint32
	for i := range dst {
		w := first + uint64(i)
		if blk := w / 8; i == 0 || w%8 == 0 {
			block = Block([4]uint32{uint32(blk), uint32(blk >> 32), stream[0], stream[1]}, key)
		}
		dst[i] = uint16(block[w/2%4] >> (16 * (w % 2)))
	}
}

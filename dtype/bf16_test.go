package dtype

import (
	"math"
	"math/rand/v2"
	"testing"
)

// bf16Patterns returns float32 bit patterns for the bulk bfloat16 encode:
// every exponent with the low halves at and around the rounding ties and
// the NaN and overflow boundaries, both signs, and random patterns.
func bf16Patterns() []uint32 {
	var p []uint32
	for e := range uint32(256) {
		for _, hi := range []uint32{0, 1, 0x40, 0x7e, 0x7f} { // top mantissa bits
			for _, lo := range []uint32{0, 1, 0x7fff, 0x8000, 0x8001, 0xffff} {
				b := e<<23 | hi<<16 | lo
				p = append(p, b, b|0x80000000)
			}
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 1 << 16 {
		p = append(p, r.Uint32())
	}
	return p
}

// TestBF16Bulk checks Encode and Decode of BF16 bit for bit against the
// scalar BF16.Encode and F32FromBF16: every code decoded, special and
// random float32 patterns encoded, saturating or not, and every length
// 0..70 from unaligned starts, which covers the kernels' tails.
func TestBF16Bulk(t *testing.T) {
	codes := make([]byte, 2<<16)
	for c := range 1 << 16 {
		le.PutUint16(codes[2*c:], uint16(c))
	}
	vals := make([]float32, 1<<16)
	Decode(BF16, vals, codes)
	for c, v := range vals {
		if got, want := math.Float32bits(v), math.Float32bits(F32FromBF16(uint16(c))); got != want {
			t.Fatalf("Decode(%#04x) = %#08x, want %#08x", c, got, want)
		}
	}

	bits := bf16Patterns()
	src := make([]float32, len(bits))
	for i, b := range bits {
		src[i] = math.Float32frombits(b)
	}
	dst := make([]byte, 2*len(src))
	for _, sat := range []bool{false, true} {
		Encode(BF16, dst, src, sat)
		for i, x := range src {
			if got, want := le.Uint16(dst[2*i:]), uint16(BF16.Encode(x, sat)); got != want {
				t.Fatalf("Encode(%#08x, sat=%v) = %#04x, want %#04x", bits[i], sat, got, want)
			}
		}
	}

	// One spare element past the longest run shows a write beyond the end.
	enc, dec := make([]byte, 2*74), make([]float32, 74)
	for off := range 4 {
		for n := range 71 {
			clear(enc)
			Encode(BF16, enc[2*off:], src[off:off+n], false)
			for i, x := range src[off : off+n] {
				if got, want := le.Uint16(enc[2*(off+i):]), BF16FromF32(x); got != want {
					t.Fatalf("offset %d, length %d: Encode[%d] = %#04x, want %#04x", off, n, i, got, want)
				}
			}
			clear(dec)
			Decode(BF16, dec[off:off+n], codes[2*off:])
			for i, v := range dec[off : off+n] {
				if got, want := math.Float32bits(v), uint32(off+i)<<16; got != want {
					t.Fatalf("offset %d, length %d: Decode[%d] = %#08x, want %#08x", off, n, i, got, want)
				}
			}
			if le.Uint16(enc[2*(off+n):]) != 0 || dec[off+n] != 0 {
				t.Fatalf("offset %d, length %d: wrote past the end", off, n)
			}
		}
	}
}

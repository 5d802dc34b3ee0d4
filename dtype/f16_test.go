package dtype

import (
	"math"
	"math/rand/v2"
	"testing"
)

// f16Patterns returns float32 bit patterns for the bulk half encode, both
// signs: for every exponent, the bits at and around the normal rounding ties
// and the 65504/65520 overflow edges, and single mantissa bits with their
// neighbours, which put a tie at every subnormal rounding position and give
// NaNs of many payloads, signalling ones included; then random patterns,
// half of them in and near the half range.
func f16Patterns() []uint32 {
	var p []uint32
	add := func(b uint32) { p = append(p, b, b|0x80000000) }
	for e := range uint32(256) {
		for _, hi := range []uint32{0, 1, 0x200, 0x3fe, 0x3ff} { // the 10 kept mantissa bits
			for _, lo := range []uint32{0, 1, 0xfff, 0x1000, 0x1001, 0x1fff} { // the 13 rounded off
				add(e<<23 | hi<<13 | lo)
			}
		}
		for k := range 23 {
			for _, m := range []uint32{1<<k - 1, 1 << k, 1<<k + 1, 3 << k} {
				add(e<<23 | m&0x7fffff)
			}
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 1 << 15 {
		p = append(p, r.Uint32(), (100+r.Uint32N(45))<<23|r.Uint32()&0x807fffff)
	}
	return p
}

// TestF16Bulk checks Encode and Decode of F16 bit for bit against the scalar
// F16.Encode and F16.Decode, as TestBF16Bulk does for BF16, and the Go
// conversions that serve the tails against them on every input too.
func TestF16Bulk(t *testing.T) {
	codes := make([]byte, 2<<16)
	for c := range 1 << 16 {
		le.PutUint16(codes[2*c:], uint16(c))
	}
	vals := make([]float32, 1<<16)
	Decode(F16, vals, codes)
	for c, v := range vals {
		want := math.Float32bits(F16.Decode(uint32(c)))
		if got := math.Float32bits(v); got != want {
			t.Fatalf("Decode(%#04x) = %#08x, want %#08x", c, got, want)
		}
		if got := math.Float32bits(fromF16(uint16(c))); got != want {
			t.Fatalf("fromF16(%#04x) = %#08x, want %#08x", c, got, want)
		}
	}

	bits := f16Patterns()
	src := make([]float32, len(bits))
	for i, b := range bits {
		src[i] = math.Float32frombits(b)
		if got, want := toF16(src[i]), F16FromF32(src[i]); got != want {
			t.Fatalf("toF16(%#08x) = %#04x, want %#04x", b, got, want)
		}
	}
	dst := make([]byte, 2*len(src))
	for _, sat := range []bool{false, true} {
		Encode(F16, dst, src, sat)
		for i, x := range src {
			if got, want := le.Uint16(dst[2*i:]), uint16(F16.Encode(x, sat)); got != want {
				t.Fatalf("Encode(%#08x, sat=%v) = %#04x, want %#04x", bits[i], sat, got, want)
			}
		}
	}

	// Lengths 0..70 cover the kernels' tails; the random patterns at the end
	// of src and codes give them varied values. One spare element past the
	// longest run shows a write beyond the end.
	src, codes = src[len(src)-74:], dst[len(dst)-2*74:]
	enc, dec := make([]byte, 2*74), make([]float32, 74)
	for off := range 4 {
		for n := range 71 {
			for _, sat := range []bool{false, true} {
				clear(enc)
				Encode(F16, enc[2*off:], src[off:off+n], sat)
				for i, x := range src[off : off+n] {
					if got, want := le.Uint16(enc[2*(off+i):]), uint16(F16.Encode(x, sat)); got != want {
						t.Fatalf("offset %d, length %d, sat=%v: Encode[%d] = %#04x, want %#04x", off, n, sat, i, got, want)
					}
				}
				if le.Uint16(enc[2*(off+n):]) != 0 {
					t.Fatalf("offset %d, length %d, sat=%v: Encode wrote past the end", off, n, sat)
				}
			}
			clear(dec)
			Decode(F16, dec[off:off+n], codes[2*off:])
			for i, v := range dec[off : off+n] {
				c := le.Uint16(codes[2*(off+i):])
				if got, want := math.Float32bits(v), math.Float32bits(F32FromF16(c)); got != want {
					t.Fatalf("offset %d, length %d: Decode[%d] of %#04x = %#08x, want %#08x", off, n, i, c, got, want)
				}
			}
			if dec[off+n] != 0 {
				t.Fatalf("offset %d, length %d: Decode wrote past the end", off, n)
			}
		}
	}
}

// The benchmarks are bench_test.go's, whose BF16 twins they compare with.

func BenchmarkEncodeF16(b *testing.B) { benchEncode(b, F16) }
func BenchmarkDecodeF16(b *testing.B) { benchDecode(b, F16) }

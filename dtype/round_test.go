package dtype

import (
	"math"
	"math/rand/v2"
	"testing"
)

// roundPatterns returns float32 bit patterns for RoundFloat32s: for every
// exponent and every rounding position, mantissas at and around the tie with
// an even and an odd kept bit, under zero and all-ones high bits, both signs;
// then random patterns. Across the exponents these cover ±0, float32 and
// target subnormals, ties, overflow to inf or max, ±inf, and quiet and
// signalling NaNs with payloads.
func roundPatterns() []uint32 {
	var p []uint32
	for e := range uint32(256) {
		for t := range uint32(22) { // the highest bit rounded off
			half := uint32(1) << t
			for _, top := range []uint32{0, 0x7fffff &^ (half<<2 - 1)} {
				for _, kept := range []uint32{0, half << 1} {
					for _, low := range []uint32{0, 1, half - 1, half, half + 1, half<<1 - 1} {
						b := e<<23 | top | kept | low
						p = append(p, b, b|0x80000000)
					}
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 1 << 20 {
		p = append(p, r.Uint32())
	}
	return p
}

// TestRoundFloat32s checks RoundFloat32s against d.Round bit for bit: over
// whole slices and one element at a time (the Go loop that follows the
// AVX-512 kernel), and at every length 0..70 from unaligned starts, with a
// spare element past the end that must stay untouched.
func TestRoundFloat32s(t *testing.T) {
	bits := roundPatterns()
	src := make([]float32, len(bits))
	for i, b := range bits {
		src[i] = math.Float32frombits(b)
	}
	xs := make([]float32, len(src))
	for _, d := range []DType{BF16, F16, E4M3FN, F32} {
		check := func(what string, got []float32, from int) {
			t.Helper()
			for i, x := range got {
				if g, w := math.Float32bits(x), math.Float32bits(d.Round(src[from+i])); g != w {
					t.Fatalf("%v %s: RoundFloat32s(%#08x) = %#08x, want %#08x", d, what, bits[from+i], g, w)
				}
			}
		}
		copy(xs, src)
		RoundFloat32s(d, xs)
		check("bulk", xs, 0)

		copy(xs, src)
		for i := range xs {
			RoundFloat32s(d, xs[i:i+1])
		}
		check("single", xs, 0)

		const spare = 0x12345678
		for off := range 4 {
			for n := range 71 {
				buf := xs[:off+n+1]
				copy(buf, src)
				buf[off+n] = math.Float32frombits(spare)
				RoundFloat32s(d, buf[off:off+n])
				check("tail", buf[off:off+n], off)
				if math.Float32bits(buf[off+n]) != spare {
					t.Fatalf("%v offset %d, length %d: wrote past the end", d, off, n)
				}
			}
		}
	}
}

// The benchmarks compare RoundFloat32s with the per-element d.Round loop it
// replaces, in float32 bytes (4 per element).

func benchRound(b *testing.B, d DType, round func(DType, []float32)) {
	xs := benchInput()
	b.SetBytes(4 * benchN)
	for b.Loop() {
		round(d, xs)
	}
}

func roundEach(d DType, xs []float32) {
	for i, x := range xs {
		xs[i] = d.Round(x)
	}
}

func BenchmarkRoundFloat32sBF16(b *testing.B) { benchRound(b, BF16, RoundFloat32s) }
func BenchmarkRoundFloat32sF16(b *testing.B)  { benchRound(b, F16, RoundFloat32s) }
func BenchmarkRoundEachBF16(b *testing.B)     { benchRound(b, BF16, roundEach) }
func BenchmarkRoundEachF16(b *testing.B)      { benchRound(b, F16, roundEach) }

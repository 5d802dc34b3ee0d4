package vec

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// expRef is ExpF32's definition, written out apart from expGo.
func expRef(v float32) float32 { return float32(math.Exp(float64(v))) }

// checkExp fails t unless ExpF32 gives expRef's bits for each of x.
func checkExp(t *testing.T, x []float32) {
	t.Helper()
	got := make([]float32, len(x))
	ExpF32(got, x)
	for i, v := range x {
		if want := expRef(v); math.Float32bits(got[i]) != math.Float32bits(want) {
			t.Fatalf("ExpF32 at x = %g (%#x): got %g (%#x), want %g (%#x)",
				v, math.Float32bits(v), got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
		}
	}
}

// TestExpF32Sweep checks every float32 in [-104, 89] whose bits are a
// multiple of a prime stride apart, some 60 million, both signs walked
// from 0 outwards; past those bounds e^x is 0 or +Inf. With AVX-512 it
// also checks that the kernel leaves Go few blocks: a kernel that always
// stopped would pass the comparison.
func TestExpF32Sweep(t *testing.T) {
	const stride = 37
	var x []float32
	blocks, declined := 0, 0
	flush := func() {
		checkExp(t, x)
		if useAVX512 {
			dst := make([]float32, len(x))
			for src := x; len(src) >= 8; {
				n := expAVX512(dst[:len(src)&^7], src)
				blocks += n / 8
				if n < len(src)&^7 {
					blocks++
					declined++
					n += 8
				}
				dst, src = dst[n:], src[n:]
			}
		}
		x = x[:0]
	}
	for _, hi := range []float32{89, -104} {
		sign, end := math.Float32bits(hi)&(1<<31), math.Float32bits(hi)&^(1<<31)
		for u := uint32(0); u <= end; u += stride {
			x = append(x, math.Float32frombits(sign|u))
			if len(x) == 1<<16 {
				flush()
			}
		}
	}
	flush()
	t.Logf("the kernel declined %d of %d blocks", declined, blocks)
	if useAVX512 && declined*1000 > blocks {
		t.Errorf("the kernel declined %d of %d blocks, want under 1 in 1000", declined, blocks)
	}
}

// TestExpF32Specials checks the IEEE 754 special values, NaNs with
// payloads, and every float32 near 0, near where e^x leaves 1, near where e^x crosses into
// float32's subnormals, underflows to 0, or overflows to +Inf, as well as
// near the kernel's clamp bounds.
func TestExpF32Specials(t *testing.T) {
	x := []float32{
		float32(math.Inf(1)), float32(math.Inf(-1)),
		math.MaxFloat32, -math.MaxFloat32,
		math.Float32frombits(0x7fc00000), // quiet NaN
		math.Float32frombits(0xffc12345), // quiet NaN with a sign and a payload
		math.Float32frombits(0x7f800001), // signaling NaNs
		math.Float32frombits(0x7fbfffff),
	}
	const radius = 1 << 15
	for _, v := range []float32{0, math.Float32frombits(1 << 31)} { // ±0 and the subnormals after
		u := math.Float32bits(v)
		for d := range uint32(radius) {
			x = append(x, math.Float32frombits(u+d))
		}
	}
	for _, b := range []float64{
		math.Log(0x1p-126),                        // the smallest normal
		math.Log(0x1p-150),                        // half the smallest subnormal: below, 0
		math.Log(math.MaxFloat32 * (1 + 0x1p-24)), // half an ulp past MaxFloat32: above, +Inf
		0x1p-24, -0x1p-25, // where e^x leaves 1
		-104, 89,
	} {
		u := math.Float32bits(float32(b))
		for d := range uint32(2 * radius) {
			x = append(x, math.Float32frombits(u+d-radius))
		}
	}
	checkExp(t, x)
}

// TestExpF32Lengths checks ExpF32 at every length up to 40 and offsets
// that misalign the slices, in place and not, with NaNs scattered so that
// the kernel's blocks stop at varied places: each element is set as
// expRef's, and none outside the slice is touched.
func TestExpF32Lengths(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const guard = 8
	sentinel := float32(-12345)
	for n := range 41 {
		for off := range 4 {
			for _, inPlace := range []bool{false, true} {
				src := make([]float32, off+n+guard)
				for i := range src {
					src[i] = r.Float32()*200 - 110
					if r.IntN(16) == 0 {
						src[i] = float32(math.NaN())
					}
				}
				want := slices.Clone(src)
				for i := off; i < off+n; i++ {
					want[i] = expRef(src[i])
				}
				dst := src
				if !inPlace {
					dst = make([]float32, len(src))
					for i := range dst {
						dst[i] = sentinel
					}
					for i := range want {
						if i < off || i >= off+n {
							want[i] = sentinel
						}
					}
				}
				ExpF32(dst[off:off+n], src[off:off+n])
				for i := range dst {
					if math.Float32bits(dst[i]) != math.Float32bits(want[i]) {
						t.Fatalf("n=%d off=%d inPlace=%v: dst[%d] = %g, want %g", n, off, inPlace, i, dst[i], want[i])
					}
				}
			}
		}
	}
}

// BenchmarkExpF32 compares ExpF32 with expGo's scalar loop on a softmax's
// arguments, v - max in [-20, 0].
func BenchmarkExpF32(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	src := make([]float32, 4096)
	for i := range src {
		src[i] = -20 * r.Float32()
	}
	dst := make([]float32, len(src))
	for _, bc := range []struct {
		name string
		exp  func(dst, src []float32)
	}{{"vec", ExpF32}, {"go", expGo}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				bc.exp(dst, src)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(src)), "ns/elem")
		})
	}
}

package gemm

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/weftml/weft/dtype"
)

// TestKernels checks every micro-kernel bit for bit against the loop its
// documentation gives, adding and storing, on panels followed by NaN guard
// bands and on whole and ragged parts of a C tile surrounded by them: a read
// past a panel turns sums to NaN, and a write outside the part overwrites a
// guard. Panels of tiny values, whose products underflow, give sums of -0
// and +0, which a kernel must store as its loop does.
func TestKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	sign := func() float64 { return float64(2*rng.IntN(2) - 1) }
	uniform32 := func() float32 { return float32(2*rng.Float64() - 1) }
	uniform64 := func() float64 { return 2*rng.Float64() - 1 }
	tiny32 := func() float32 { return float32(sign() * 0x1p-80) }
	tiny64 := func() float64 { return sign() * 0x1p-540 }
	// Products near the smallest normal, flushed when below it, and
	// inputs that are denormal or zero.
	denormal32 := func() float32 {
		if rng.IntN(4) == 0 {
			return float32(sign()*float64(rng.IntN(128))) * 0x1p-133
		}
		return float32(sign()*(1+float64(rng.IntN(128))/128)) * float32(math.Ldexp(1, -60-rng.IntN(8)))
	}
	bf16Of := func(rand func() float32) func() float32 {
		return func() float32 { return math.Float32frombits(uint32(dtype.BF16FromF32(rand())) << 16) }
	}
	// A pair of bfloat16 in the bits of a float32, as impl.bf16 packs them.
	pairOf := func(rand func() float32) func() float32 {
		return func() float32 {
			lo, hi := dtype.BF16FromF32(rand()), dtype.BF16FromF32(rand())
			return math.Float32frombits(uint32(hi)<<16 | uint32(lo))
		}
	}
	for _, im := range impls {
		step32, step64 := func(s, x, y float32) float32 { return s + x*y }, func(s, x, y float64) float64 { return s + x*y }
		if im.name != goImpl.name { // the assembly kernels fuse
			step32, step64 = fma32, func(s, x, y float64) float64 { return math.FMA(x, y, s) }
		}
		for _, kc := range []int{1, 2, 3, 4, 5, 7, 8, 9, 64, 257} {
			name := fmt.Sprintf("%s/kc=%d", im.name, kc)
			checkKernel(t, name+"/f32", im.f32, kc, uniform32, step32)
			checkKernel(t, name+"/f64", im.f64, kc, uniform64, step64)
			checkKernel(t, name+"/f32/tiny", im.f32, kc, tiny32, step32)
			checkKernel(t, name+"/f64/tiny", im.f64, kc, tiny64, step64)
			if im.bf16.fn != nil {
				checkKernel(t, name+"/bf16", im.bf16, kc, pairOf(uniform32), stepBF16)
				checkKernel(t, name+"/bf16/tiny", im.bf16, kc, pairOf(tiny32), stepBF16)
				checkKernel(t, name+"/bf16/denormal", im.bf16, kc, pairOf(denormal32), stepBF16)
			}
			checkKernel(t, name+"/widen", im.widen, kc, bf16Of(uniform32), fmaRefStep)
			checkKernel(t, name+"/widen/denormal", im.widen, kc, bf16Of(denormal32), fmaRefStep)
		}
	}
}

// checkKernel runs k on random panels with kc steps, for every part of the
// tile from 1×1 to the whole, and compares each element of the part with
// the sum that step accumulates from zero over the panels' values: added to
// the element's random start, or stored over a NaN, which the kernel must
// not read.
func checkKernel[T float](t *testing.T, name string, k kernel[T], kc int, rand func() T, step func(s, x, y T) T) {
	t.Helper()
	nan := T(math.NaN())
	guarded := func(n int) []T {
		x := make([]T, n+16)
		for i := range x {
			x[i] = nan
			if i < n {
				x[i] = rand()
			}
		}
		return x[:n]
	}
	a, b := guarded(k.mr*kc), guarded(k.nr*kc)
	sum := make([]T, k.mr*k.nr)
	for i := range k.mr {
		for j := range k.nr {
			for p := range kc {
				sum[i*k.nr+j] = step(sum[i*k.nr+j], a[p*k.mr+i], b[p*k.nr+j])
			}
		}
	}
	ldc := k.nr + 3
	c := make([]T, (k.mr+2)*ldc)
	c0 := ldc + 1 // guard row above, guard column to the left
	for _, add := range []bool{true, false} {
		for h := 1; h <= k.mr; h++ {
			for w := 1; w <= k.nr; w++ {
				for i := range c {
					c[i] = nan
					if r, j := i/ldc-1, i%ldc-1; add && r >= 0 && r < h && j >= 0 && j < w {
						c[i] = rand()
					}
				}
				want := append([]T(nil), c...)
				for i := range h {
					for j := range w {
						e := &want[c0+i*ldc+j]
						if add {
							*e += sum[i*k.nr+j]
						} else {
							*e = sum[i*k.nr+j]
						}
					}
				}
				k.fn(kc, a, b, c[c0:], ldc, h, w, add)
				for i := range c {
					if g, e := c[i], want[i]; bitsOf(g) != bitsOf(e) {
						t.Fatalf("%s/add=%v/%dx%d: C[%d][%d] = %v, want %v", name, add, h, w, i/ldc-1, i%ldc-1, g, e)
					}
				}
			}
		}
	}
}

// bitsOf returns the bits of x, which tell -0 from +0 (and compare a NaN
// guard left alone equal to itself).
func bitsOf[T float](x T) uint64 {
	if unsafe.Sizeof(x) == 4 {
		return uint64(math.Float32bits(float32(x)))
	}
	return math.Float64bits(float64(x))
}

// fma32 returns x·y+s rounded once to float32.
func fma32(s, x, y float32) float32 {
	z := new(big.Float).SetPrec(400).SetFloat64(float64(x) * float64(y)) // exact
	z.Add(z, big.NewFloat(float64(s)))                                   // exact at this precision
	r, _ := z.Float32()
	return r
}

// stepBF16 is a step of the bfloat16 kernel (see bf16gemmAVX512): the
// fused products of the high and then the low halves of the pairs x and y,
// with the instruction's denormal handling.
func stepBF16(s, x, y float32) float32 {
	hi := func(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ 0xffff) }
	lo := func(v float32) float32 { return math.Float32frombits(math.Float32bits(v) << 16) }
	return fmaRef(lo(x), lo(y), fmaRef(hi(x), hi(y), s))
}

// fmaRefStep is a step of a widen kernel.
func fmaRefStep(s, x, y float32) float32 { return fmaRef(x, y, s) }

// TestTransposers checks the transposer of every impl, and the float64
// one, on misaligned rows of every height up to 12 and lengths up to 19,
// with guard bands around the destination rows.
func TestTransposers(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	type transposerCase struct {
		name string
		size int
		tr   transposer
	}
	cases := []transposerCase{{"go/f64", 8, transposeGo[uint64]}}
	for _, im := range impls {
		cases = append(cases, transposerCase{im.name, 4, im.pack.transpose})
	}
	for _, k := range cases {
		for h := 1; h <= 12; h++ {
			for n := 1; n <= 19; n++ {
				lds, ldd := n*k.size+3, (h+1)*k.size
				src := make([]byte, 1+(h-1)*lds+n*k.size)
				for i := range src {
					src[i] = byte(rng.Uint32())
				}
				dst := make([]byte, n*ldd)
				for i := range dst {
					dst[i] = 0xa5
				}
				want := append([]byte(nil), dst...)
				for i := range h {
					for p := range n {
						copy(want[p*ldd+i*k.size:][:k.size], src[1+i*lds+p*k.size:])
					}
				}
				k.tr(h, n, src[1:], lds, dst, ldd)
				if string(dst) != string(want) {
					t.Fatalf("%s: %d rows of %d words: got % x, want % x", k.name, h, n, dst, want)
				}
			}
		}
	}
}

// TestLookups checks the lookup of every impl against its loop, for every
// 8-bit float format and lengths up to 40, with a guard band after dst.
func TestLookups(t *testing.T) {
	src := make([]byte, 41)
	for i := range src {
		src[i] = byte(37*i + 11)
	}
	for _, im := range impls {
		for d, lut := range luts {
			for n := range 41 {
				dst := make([]float32, n+1)
				dst[n] = 42
				im.pack.lookup(dst[:n], src[1:n+1], lut, 0.37)
				for i, v := range dst {
					want := float32(42)
					if i < n {
						want = lut[src[1+i]] * 0.37
					}
					if math.Float32bits(v) != math.Float32bits(want) && !(v != v && want != want) {
						t.Fatalf("%s/%v: %d codes: dst[%d] = %v, want %v", im.name, d, n, i, v, want)
					}
				}
			}
		}
	}
}

// TestInterleaves checks the interleave of every impl against its loop on
// misaligned rows of lengths up to 40, with a guard band after dst.
func TestInterleaves(t *testing.T) {
	src := make([]byte, 2*2*41+1)
	for i := range src {
		src[i] = byte(37*i + 11)
	}
	lo, hi := src[1:83], src[83:]
	for _, im := range impls {
		for n := range 41 {
			dst := make([]uint32, n+1)
			dst[n] = 42
			im.pack.interleave(dst[:n], lo[:2*n], hi[:2*n])
			for i, v := range dst {
				want := uint32(42)
				if i < n {
					want = uint32(lo[2*i]) | uint32(lo[2*i+1])<<8 | uint32(hi[2*i])<<16 | uint32(hi[2*i+1])<<24
				}
				if v != want {
					t.Fatalf("%s: %d pairs: dst[%d] = %#x, want %#x", im.name, n, i, v, want)
				}
			}
		}
	}
}

// TestCodes checks the codes of every impl against its loop, for runs of
// up to 40 codes from either nibble, with a guard band after dst.
func TestCodes(t *testing.T) {
	src := make([]byte, 24)
	for i := range src {
		src[i] = byte(37*i + 11)
	}
	var cb [16]float32
	for c := range cb {
		cb[c] = float32(c)/7 - 1
	}
	for _, im := range impls {
		for e := range 4 {
			for n := range 41 {
				dst := make([]float32, n+1)
				dst[n] = 42
				im.pack.codes(dst[:n], src, e, &cb, 0.37)
				for i, v := range dst {
					want := float32(42)
					if j := e + i; i < n {
						want = cb[src[j/2]>>(4-4*(j&1))&15] * 0.37
					}
					if v != want {
						t.Fatalf("%s: %d codes from %d: dst[%d] = %v, want %v", im.name, n, e, i, v, want)
					}
				}
			}
		}
	}
}

// TestWidens checks the widen of every impl against its loop on misaligned
// bfloat16 of lengths up to 40, with a guard band after dst.
func TestWidens(t *testing.T) {
	src := make([]byte, 2*41+1)
	for i := range src {
		src[i] = byte(37*i + 11)
	}
	for _, im := range impls {
		for n := range 41 {
			dst := make([]float32, n+1)
			dst[n] = 42
			im.pack.widen(dst[:n], src[1:2*n+1], 0.37)
			for i, v := range dst {
				want := float32(42)
				if i < n {
					want = math.Float32frombits(uint32(src[1+2*i])<<16|uint32(src[2+2*i])<<24) * 0.37
				}
				if math.Float32bits(v) != math.Float32bits(want) && !(v != v && want != want) {
					t.Fatalf("%s: %d values: dst[%d] = %v, want %v", im.name, n, i, v, want)
				}
			}
		}
	}
}

package vec

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// geluRef and geluBackwardRef are the tensor package's float32 GELU loops,
// the product v·pdf kept from fusing with its sum as in geluBackwardGo.
func geluRef(y, cdf, x []float32) {
	for i, v := range x {
		c := 0.5 * (1 + erf32(v*sqrtHalf))
		cdf[i], y[i] = c, v*c
	}
}

func geluBackwardRef(dx, x, cdf, dy []float32) {
	for i, v := range x {
		pdf := exp32(-0.5*v*v) * invSqrt2Pi
		dx[i] = dy[i] * (cdf[i] + float32(v*pdf))
	}
}

// geluSpecials are the inputs where the kernels branch, clamp or overflow,
// and those IEEE 754 sets apart.
func geluSpecials() []float32 {
	x := []float32{
		0, 1, 0.5, math.MaxFloat32, math.SmallestNonzeroFloat32,
		0x1p-126, 0x1p-126 - 0x1p-149, // the smallest normal, the largest subnormal
		float32(math.Inf(1)),
		math.Float32frombits(0x7fc00000), // quiet NaN
		math.Float32frombits(0x7fc12345), // quiet NaN with a payload
		math.Float32frombits(0x7f800001), // signaling NaNs
		math.Float32frombits(0x7fbfffff),
	}
	// Around the bounds of erf's tail (|x·√½| = 2 and erfOne), of exp32's
	// clamp (-0.5·x·x = expMin) and of float32 (-0.5·x·x = -Inf).
	for _, b := range []float64{2 / sqrtHalf, erfOne / sqrtHalf, math.Sqrt(-2 * expMin), math.Sqrt(2 * math.MaxFloat32)} {
		u := math.Float32bits(float32(b))
		for d := range uint32(129) {
			x = append(x, math.Float32frombits(u+d-64))
		}
	}
	for _, v := range slices.Clone(x) {
		x = append(x, -v)
	}
	return x
}

// geluDy returns dy for element i: randFloat's values of any exponent,
// with a special value every 64th.
func geluDy(r *rand.Rand, i int) float32 {
	if i%64 == 63 {
		specials := []float32{0, float32(math.Inf(1)), float32(math.NaN()), math.SmallestNonzeroFloat32}
		v := specials[r.IntN(len(specials))]
		if r.IntN(2) == 0 {
			v = -v
		}
		return v
	}
	return randFloat(r)
}

// checkSame fails t unless got holds want's bits at each element, or a NaN
// where want's is one and both x and dy (nil for GELU) are NaNs: which of
// two NaNs an operation returns depends on the order in which the compiler
// gives it its operands.
func checkSame(t *testing.T, what string, x, dy, got, want []float32) {
	t.Helper()
	isNaN := func(v float32) bool { return v != v }
	for i := range got {
		if math.Float32bits(got[i]) == math.Float32bits(want[i]) ||
			dy != nil && isNaN(x[i]) && isNaN(dy[i]) && isNaN(got[i]) && isNaN(want[i]) {
			continue
		}
		t.Fatalf("%s at x[%d] = %g (%#x): got %g (%#x), want %g (%#x)", what, i, x[i], math.Float32bits(x[i]),
			got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
	}
}

var geluStride = flag.Uint64("gelu.stride", 193, "TestGELUSweep tests every `n`th float32 (1: all, in two minutes)")

// TestGELUSweep compares GELU and GELUBackward with the reference loops
// bit for bit over every 193rd float32 by default (22 million, of both
// signs) and the special inputs, with dy of every magnitude.
func TestGELUSweep(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const block = 1 << 16
	y, cdf, dy, dx := make([]float32, block), make([]float32, block), make([]float32, block), make([]float32, block)
	wantY, wantCdf, wantDx := make([]float32, block), make([]float32, block), make([]float32, block)
	for i := range dy {
		dy[i] = geluDy(r, i)
	}
	check := func(x []float32) {
		n := len(x)
		GELU(y[:n], cdf[:n], x)
		geluRef(wantY[:n], wantCdf[:n], x)
		checkSame(t, "GELU y", x, nil, y[:n], wantY[:n])
		checkSame(t, "GELU cdf", x, nil, cdf[:n], wantCdf[:n])
		GELUBackward(dx[:n], x, cdf[:n], dy[:n])
		geluBackwardRef(wantDx[:n], x, cdf[:n], dy[:n])
		checkSame(t, "GELUBackward", x, dy[:n], dx[:n], wantDx[:n])
	}
	check(geluSpecials())
	x := make([]float32, 0, block)
	for u := uint64(0); u < 1<<32; u += *geluStride {
		x = append(x, math.Float32frombits(uint32(u)))
		if len(x) == block {
			check(x)
			x = x[:0]
		}
	}
	check(x)
}

// TestGELULengths runs both paths over every length up to 70 from unaligned
// starts, and checks that they write their outputs' elements only.
func TestGELULengths(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	specials := geluSpecials()
	names := [...]string{"x", "dy", "y", "cdf", "dx"}
	for n := range 71 {
		// Slices of n elements at their own offsets into buffers with
		// room around them, whose every element is compared.
		var offs [len(names)]int
		var bufs [len(names)][]float32
		for k := range bufs {
			offs[k] = r.IntN(16)
			bufs[k] = make([]float32, n+32)
			for i := range bufs[k] {
				switch {
				case k == 1:
					bufs[k][i] = randFloat(r) // not NaN: see checkSame
				case r.IntN(4) == 0:
					bufs[k][i] = specials[r.IntN(len(specials))]
				default:
					bufs[k][i] = float32(4 * r.NormFloat64())
				}
			}
		}
		run := func(gelu func(y, cdf, x []float32), backward func(dx, x, cdf, dy []float32)) (out [len(names)][]float32) {
			var sl [len(names)][]float32
			for k := range bufs {
				out[k] = slices.Clone(bufs[k])
				sl[k] = out[k][offs[k] : offs[k]+n]
			}
			gelu(sl[2], sl[3], sl[0])
			backward(sl[4], sl[0], sl[3], sl[1])
			return out
		}
		want := run(geluRef, geluBackwardRef)
		for _, impl := range []struct {
			name     string
			gelu     func(y, cdf, x []float32)
			backward func(dx, x, cdf, dy []float32)
		}{{"GELU", GELU, GELUBackward}, {"geluGo", geluGo, geluBackwardGo}} {
			got := run(impl.gelu, impl.backward)
			for k, name := range names {
				for i := range got[k] {
					if math.Float32bits(got[k][i]) != math.Float32bits(want[k][i]) {
						t.Fatalf("%s n=%d: %s[%d] = %g (%#x), want %g (%#x)", impl.name, n, name, i-offs[k],
							got[k][i], math.Float32bits(got[k][i]), want[k][i], math.Float32bits(want[k][i]))
					}
				}
			}
		}
	}
}

// TestGELUInPlace checks that GELU with y = x gives what it gives into a
// slice of its own, on both paths and every length up to 70.
func TestGELUInPlace(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	specials := geluSpecials()
	for n := range 71 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(4 * r.NormFloat64())
			if r.IntN(4) == 0 {
				x[i] = specials[r.IntN(len(specials))]
			}
		}
		for name, gelu := range map[string]func(y, cdf, x []float32){"GELU": GELU, "geluGo": geluGo} {
			y, cdf, inPlace, cdf2 := make([]float32, n), make([]float32, n), slices.Clone(x), make([]float32, n)
			gelu(y, cdf, x)
			gelu(inPlace, cdf2, inPlace)
			for i := range y {
				if math.Float32bits(inPlace[i]) != math.Float32bits(y[i]) || math.Float32bits(cdf2[i]) != math.Float32bits(cdf[i]) {
					t.Fatalf("%s n=%d: in place y[%d], cdf[%d] = %g, %g; want %g, %g", name, n, i, i, inPlace[i], cdf2[i], y[i], cdf[i])
				}
			}
		}
	}
}

func BenchmarkGELU(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, shape := range [][2]int{{128, 128}, {64, 4096}} {
		n := shape[0] * shape[1]
		x, dy := make([]float32, n), make([]float32, n)
		for i := range x {
			x[i], dy[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
		}
		y, cdf, dx := make([]float32, n), make([]float32, n), make([]float32, n)
		type impl struct {
			name     string
			gelu     func(y, cdf, x []float32)
			backward func(dx, x, cdf, dy []float32)
		}
		impls := []impl{{"go", geluGo, geluBackwardGo}}
		if useAVX512 {
			impls = append(impls, impl{"avx512", GELU, GELUBackward})
		}
		perElement := func(b *testing.B) {
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/elem")
		}
		for _, im := range impls {
			b.Run(fmt.Sprintf("%dx%d/forward/%s", shape[0], shape[1], im.name), func(b *testing.B) {
				for b.Loop() {
					im.gelu(y, cdf, x)
				}
				perElement(b)
			})
			b.Run(fmt.Sprintf("%dx%d/backward/%s", shape[0], shape[1], im.name), func(b *testing.B) {
				for b.Loop() {
					im.backward(dx, x, cdf, dy)
				}
				perElement(b)
			})
		}
	}
}

package vec

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// adamWRef is AdamW as PyTorch runs it: one operation at a time over the
// whole slice.
func adamWRef(p, g, m, v []float32, s AdamWParams) {
	d := make([]float32, len(p))
	for i := range p {
		p[i] *= s.Decay
	}
	for i := range m {
		m[i] += float32(s.Lerp * (g[i] - m[i]))
	}
	for i := range v {
		v[i] *= s.Beta2
	}
	for i := range v {
		v[i] += float32(s.OneMinusBeta2 * g[i] * g[i])
	}
	for i := range d {
		d[i] = float32(math.Sqrt(float64(v[i])))
	}
	for i := range d {
		d[i] /= s.BC2Sqrt
	}
	for i := range d {
		d[i] += s.Eps
	}
	for i := range p {
		p[i] += float32(s.NegStep * (m[i] / d[i]))
	}
}

// randFloat returns zero, a denormal, or a normal float32 of any exponent,
// of either sign.
func randFloat(r *rand.Rand) float32 {
	x := float32(0)
	if r.IntN(8) > 0 {
		x = float32(math.Ldexp(1+r.Float64(), r.IntN(128+149)-149))
	}
	if r.IntN(2) == 0 {
		x = -x
	}
	return x
}

// adamWParams returns PyTorch's constants for step t, in float64 as it
// computes them, then rounded to float32.
func adamWParams(lr, wd, b1, b2, eps float64, t int) AdamWParams {
	return AdamWParams{
		Decay:         float32(1 - lr*wd),
		Lerp:          float32(1 - b1),
		Beta2:         float32(b2),
		OneMinusBeta2: float32(1 - b2),
		BC2Sqrt:       float32(math.Sqrt(1 - math.Pow(b2, float64(t)))),
		Eps:           float32(eps),
		NegStep:       float32(-lr / (1 - math.Pow(b1, float64(t)))),
	}
}

func TestAdamW(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	abs := func(x float32) float32 { return float32(math.Abs(float64(x))) }
	params := []AdamWParams{
		adamWParams(1e-3, 1e-2, 0.9, 0.999, 1e-8, 1),
		adamWParams(1e-3, 1e-2, 0.9, 0.999, 1e-8, 1000),
		adamWParams(3e-4, 0.1, 0.95, 0.98, 0, 7), // eps 0: 0/0 is NaN
		{randFloat(r), randFloat(r), randFloat(r), randFloat(r), abs(randFloat(r)), abs(randFloat(r)), randFloat(r)},
	}
	impls := []struct {
		name string
		fn   func(p, g, m, v []float32, s AdamWParams)
	}{{"AdamW", AdamW}, {"adamWGo", adamWGo}}
	lens := []int{1000, 4099}
	for n := range 71 {
		lens = append(lens, n)
	}
	for _, s := range params {
		for _, n := range lens {
			// Each slice starts at its own offset into a buffer with
			// room around it, whose every element is compared: those
			// outside the slice must be left alone.
			var offs [4]int
			var in [4][]float32
			for k := range in {
				offs[k] = r.IntN(16)
				in[k] = make([]float32, n+32)
				for i := range in[k] {
					in[k][i] = randFloat(r)
					if k == 3 {
						in[k][i] = abs(in[k][i]) // v ≥ 0
					}
				}
			}
			run := func(fn func(p, g, m, v []float32, s AdamWParams)) (out [4][]float32) {
				var sl [4][]float32
				for k := range in {
					out[k] = slices.Clone(in[k])
					sl[k] = out[k][offs[k] : offs[k]+n]
				}
				fn(sl[0], sl[1], sl[2], sl[3], s)
				return out
			}
			want := run(adamWRef)
			for _, impl := range impls {
				got := run(impl.fn)
				for k, name := range []string{"p", "g", "m", "v"} {
					for i := range got[k] {
						if math.Float32bits(got[k][i]) != math.Float32bits(want[k][i]) {
							t.Fatalf("%s %+v n=%d: %s[%d] = %g (%#x), want %g (%#x)", impl.name, s, n, name, i-offs[k],
								got[k][i], math.Float32bits(got[k][i]), want[k][i], math.Float32bits(want[k][i]))
						}
					}
				}
			}
		}
	}
}

// adamWBenchInputs returns the benchmarks' p, g, m and v: n standard
// normal values each, v squared.
func adamWBenchInputs(n int) [4][]float32 {
	r := rand.New(rand.NewPCG(1, 2))
	var in [4][]float32
	for k := range in {
		in[k] = make([]float32, n)
		for i := range in[k] {
			in[k][i] = float32(r.NormFloat64())
		}
	}
	for i, x := range in[3] {
		in[3][i] = x * x
	}
	return in
}

func BenchmarkAdamW(b *testing.B) {
	const n = 1 << 20
	s := adamWParams(1e-3, 1e-2, 0.9, 0.999, 1e-8, 10)
	in := adamWBenchInputs(n)
	bench := func(fn func(p, g, m, v []float32, s AdamWParams)) func(b *testing.B) {
		return func(b *testing.B) {
			b.SetBytes(7 * 4 * n) // four slices read, three written
			for b.Loop() {
				fn(in[0], in[1], in[2], in[3], s)
			}
		}
	}
	b.Run("go", bench(adamWGo))
	if useAVX512 {
		b.Run("avx512", bench(AdamW))
	}
}

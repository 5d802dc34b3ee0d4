package vec

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weftml/weft/dtype"
)

// adamWBF16Ref is tensor's adamWRange over bfloat16 storage: one operation
// at a time over the whole slice, its results rounded with dtype's bulk
// rounding where the tensor written (v's for d) is bfloat16.
func adamWBF16Ref(p, g, m, v []float32, s AdamWParams, roundP, roundM, roundV bool) {
	round := func(on bool, xs []float32) {
		if on {
			dtype.RoundFloat32s(dtype.BF16, xs)
		}
	}
	d := make([]float32, len(p))
	for i := range p {
		p[i] *= s.Decay
	}
	round(roundP, p)
	for i := range m {
		m[i] += float32(s.Lerp * (g[i] - m[i]))
	}
	round(roundM, m)
	for i := range v {
		v[i] *= s.Beta2
	}
	round(roundV, v)
	for i := range v {
		v[i] += float32(s.OneMinusBeta2 * g[i] * g[i])
	}
	round(roundV, v)
	for i := range d {
		d[i] = float32(math.Sqrt(float64(v[i])))
	}
	round(roundV, d)
	for i := range d {
		d[i] /= s.BC2Sqrt
	}
	round(roundV, d)
	for i := range d {
		d[i] += s.Eps
	}
	round(roundV, d)
	for i := range p {
		p[i] += float32(s.NegStep * (m[i] / d[i]))
	}
	round(roundP, p)
}

// randSpecial returns randFloat's values, and now and then ±inf, a NaN
// with a random payload, or a value next to a bfloat16 rounding boundary.
func randSpecial(r *rand.Rand) float32 {
	switch r.IntN(16) {
	case 0:
		return float32(math.Inf(1 - 2*r.IntN(2)))
	case 1:
		return randNaN(r)
	case 2, 3:
		// Low half 0x7fff, 0x8000 or 0x8001: ties and near ties.
		return math.Float32frombits(math.Float32bits(randFloat(r))&^0xffff | 0x7fff + r.Uint32N(3))
	}
	return randFloat(r)
}

// randNaN returns a NaN of either sign with a random payload, quiet or
// signaling.
func randNaN(r *rand.Rand) float32 {
	return math.Float32frombits(0x7f800001 + r.Uint32N(0x7fffff) | r.Uint32N(2)<<31)
}

// randModerate returns a float32 whose magnitude is within 2^±20, of either
// sign: AdamW over these neither overflows nor divides by zero, so no NaN
// arises but from the inputs.
func randModerate(r *rand.Rand) float32 {
	x := float32(math.Ldexp(1+r.Float64(), r.IntN(41)-20))
	if r.IntN(2) == 0 {
		x = -x
	}
	return x
}

// TestAdamWBF16 compares AdamWBF16 and its Go twin with adamWBF16Ref bit
// for bit, for every combination of the round flags. Inputs of every kind
// ("wild") can meet two different NaNs in one operation, whose result is
// either of them: x86 gives the first operand's, and Go orders the operands
// of commutative ops as it likes, so there, a NaN matches any NaN that is
// quiet and, in a bfloat16 tensor, bfloat16. With one NaN input per
// element among p, m and v over moderate values ("payloads"), each NaN has
// one source, and its bits must match too.
func TestAdamWBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	abs := func(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }
	wild := []AdamWParams{
		adamWParams(1e-3, 1e-2, 0.9, 0.999, 1e-8, 1),
		adamWParams(1e-3, 1e-2, 0.9, 0.999, 1e-8, 1000),
		adamWParams(3e-4, 0.1, 0.95, 0.98, 0, 7), // eps 0: 0/0 is NaN
		{randFloat(r), randFloat(r), randFloat(r), randFloat(r), abs(randFloat(r)), abs(randFloat(r)), randFloat(r)},
	}
	impls := []struct {
		name string
		fn   func(p, g, m, v []float32, s AdamWParams, roundP, roundM, roundV bool)
	}{{"AdamWBF16", AdamWBF16}, {"adamWBF16Go", adamWBF16Go}}
	lens := []int{1000, 4099}
	for n := range 71 {
		lens = append(lens, n)
	}
	for _, payloads := range []bool{false, true} {
		params := wild
		if payloads {
			params = wild[:2]
		}
		for _, s := range params {
			for _, n := range lens {
				for flags := range 8 {
					rounds := [4]bool{flags&1 != 0, false, flags&2 != 0, flags&4 != 0} // p, g, m, v
					// Each slice starts at its own offset into a buffer
					// with room around it, whose every element is
					// compared: those outside the slice must be left
					// alone. Inputs stored in bfloat16 hold bfloat16
					// values.
					var offs [4]int
					var in [4][]float32
					for k := range in {
						offs[k] = r.IntN(16)
						in[k] = make([]float32, n+32)
						for i := range in[k] {
							if payloads {
								in[k][i] = randModerate(r)
							} else {
								in[k][i] = randSpecial(r)
							}
							if k == 3 && (payloads || r.IntN(32) > 0) {
								in[k][i] = abs(in[k][i]) // v ≥ 0 but for a few wild ones, whose sqrt is NaN
							}
						}
					}
					if payloads {
						for i := range n {
							if r.IntN(8) == 0 {
								k := []int{0, 2, 3}[r.IntN(3)]
								in[k][offs[k]+i] = randNaN(r)
							}
						}
					}
					for k := range in {
						if rounds[k] {
							dtype.RoundFloat32s(dtype.BF16, in[k])
						}
					}
					run := func(fn func(p, g, m, v []float32, s AdamWParams, roundP, roundM, roundV bool)) (out [4][]float32) {
						var sl [4][]float32
						for k := range in {
							out[k] = slices.Clone(in[k])
							sl[k] = out[k][offs[k] : offs[k]+n]
						}
						fn(sl[0], sl[1], sl[2], sl[3], s, rounds[0], rounds[2], rounds[3])
						return out
					}
					want := run(adamWBF16Ref)
					for _, impl := range impls {
						got := run(impl.fn)
						for k, name := range []string{"p", "g", "m", "v"} {
							for i := range got[k] {
								x, y := math.Float32bits(got[k][i]), math.Float32bits(want[k][i])
								inside := i >= offs[k] && i < offs[k]+n
								if x == y || !payloads && inside && anyNaN(x, y, rounds[k]) {
									continue
								}
								t.Fatalf("%s %+v n=%d round p,m,v=%v,%v,%v payloads=%v: %s[%d] = %g (%#x), want %g (%#x)",
									impl.name, s, n, rounds[0], rounds[2], rounds[3], payloads, name, i-offs[k],
									got[k][i], x, want[k][i], y)
							}
						}
					}
				}
			}
		}
	}
}

// anyNaN reports whether got and want, float32 bits, are both NaN and got
// is quiet and, if bf16, has a clear low half.
func anyNaN(got, want uint32, bf16 bool) bool {
	isNaN := func(b uint32) bool { return b&0x7fffffff > 0x7f800000 }
	return isNaN(got) && isNaN(want) && got&0x400000 != 0 && (!bf16 || got&0xffff == 0)
}

func BenchmarkAdamWBF16(b *testing.B) {
	const n = 1 << 20
	s := adamWParams(1e-3, 1e-2, 0.9, 0.999, 1e-8, 10)
	in := adamWBenchInputs(n)
	for _, x := range in {
		dtype.RoundFloat32s(dtype.BF16, x) // bf16 tensors' values
	}
	bench := func(fn func(p, g, m, v []float32, s AdamWParams, roundP, roundM, roundV bool)) func(b *testing.B) {
		return func(b *testing.B) {
			b.SetBytes(7 * 4 * n) // four slices read, three written
			for b.Loop() {
				fn(in[0], in[1], in[2], in[3], s, true, true, true)
			}
		}
	}
	b.Run("go", bench(adamWBF16Go))
	if useAVX512 {
		b.Run("avx512", bench(AdamWBF16))
	}
}

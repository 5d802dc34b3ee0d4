package vec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// absMaxRef is precision/fp8's amaxOf as it was before AbsMax.
func absMaxRef(vals []float32) float32 {
	var m float32
	for _, v := range vals {
		m = max(m, math.Float32frombits(math.Float32bits(v)&^(1<<31)))
	}
	return m
}

func TestAbsMax(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	nan := func() float32 { return randNaN(r) }
	specials := []func() float32{
		func() float32 { return 0 },
		func() float32 { return float32(math.Copysign(0, -1)) },
		func() float32 { return float32(math.Inf(1)) },
		func() float32 { return float32(math.Inf(-1)) },
		func() float32 { return math.MaxFloat32 },
		func() float32 { return -math.SmallestNonzeroFloat32 },
	}
	impls := []struct {
		name string
		fn   func([]float32) float32
	}{{"AbsMax", AbsMax}, {"absMaxGo", func(xs []float32) float32 { return absMaxGo(0, xs) }}}
	check := func(what string, xs []float32) {
		t.Helper()
		want := math.Float32bits(absMaxRef(xs))
		for _, impl := range impls {
			if got := math.Float32bits(impl.fn(xs)); got != want {
				t.Fatalf("%s of %d %s: %#x, want %#x (%v)", impl.name, len(xs), what, got, want, xs)
			}
		}
	}
	lens := []int{1000, 4099}
	for n := range 71 {
		lens = append(lens, n)
	}
	for _, n := range lens {
		// Slices of a buffer start anywhere in the first sixteen.
		buf := make([]float32, n+16)
		off := r.IntN(16)
		xs := buf[off : off+n]
		for i := range xs {
			xs[i] = randFloat(r)
		}
		check("random floats", xs)
		orig := slices.Clone(xs)
		for i := range xs {
			for _, s := range specials {
				xs[i] = s()
				check(fmt.Sprintf("with %g at %d", xs[i], i), xs)
			}
			xs[i] = nan()
			check(fmt.Sprintf("with a NaN at %d", i), xs)
			j := r.IntN(n)
			xs[j] = nan()
			check(fmt.Sprintf("with NaNs at %d and %d", i, j), xs)
			copy(xs, orig)
		}
		specials = append(specials, nan)
		for i := range xs {
			xs[i] = specials[r.IntN(len(specials))]()
		}
		check("of special values and NaNs", xs)
		specials = specials[:len(specials)-1]
	}
}

func BenchmarkAbsMax(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	xs := make([]float32, 1<<20)
	for i := range xs {
		xs[i] = float32(r.NormFloat64())
	}
	bench := func(fn func([]float32) float32) func(b *testing.B) {
		return func(b *testing.B) {
			b.SetBytes(4 * int64(len(xs)))
			for b.Loop() {
				fn(xs)
			}
		}
	}
	b.Run("go", bench(absMaxRef))
	if useAVX512 {
		b.Run("avx512", bench(AbsMax))
	}
}

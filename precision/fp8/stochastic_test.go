package fp8

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// TestE2M1StochasticIsUnbiased: over all 2^16 random words, the mean of
// e2m1Stochastic(x) is x (clamped to ±6) to within 2^-16 of the spacing
// around it, values of E2M1 never move, and NaN and ±0 give +0.
func TestE2M1StochasticIsUnbiased(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	xs := []float32{0.1, -0.1, 0.25, 0.3, 0.75, 1.2, 1.9, 2.5, 3.3, -3.9, 4.2, 5, 5.999, -6, 7, -40}
	for range 32 {
		xs = append(xs, float32(rng.Float64()*14-7))
	}
	for _, x := range xs {
		sum := 0.0
		for r := range 1 << 16 {
			sum += float64(e2m1Stochastic(x, uint16(r)))
		}
		c := max(min(float64(x), 6), -6)
		step := 2.0
		if a := math.Abs(c); a < 2 {
			step = 0.5
		} else if a < 4 {
			step = 1
		}
		if mean := sum / (1 << 16); math.Abs(mean-c) > step/(1<<16) {
			t.Errorf("x %v: mean of its stochastic casts %v, want %v to within %v", x, mean, c, step/(1<<16))
		}
	}
	for _, v := range []float32{0.5, 1, 1.5, 2, 3, 4, 6, -0.5, -6} {
		for _, r := range []uint16{0, 1, 0x8000, 0xffff} {
			if got := e2m1Stochastic(v, r); got != v {
				t.Errorf("e2m1Stochastic(%v, %#x) = %v, want it unchanged", v, r, got)
			}
		}
	}
	for _, v := range []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN())} {
		if got := e2m1Stochastic(v, 0xffff); math.Float32bits(got) != 0 {
			t.Errorf("e2m1Stochastic(%v) = %v, want +0", v, got)
		}
	}
}

// TestNVFP4StochasticMean: the output gradient's casts, one per backward
// pass, draw new random words each time, so their mean over 256 casts
// lies far closer to the gradient (down columns: to its Hadamard
// transform) than the cast to nearest does; the same
// seed and count give the same cast, another seed or rank another.
func TestNVFP4StochasticMean(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	const n, casts = 32, 256
	vals := normalRow(rng, n*n, 1)
	dy := tensor.FromFloat32(vals, n, n)
	seed, count := uint64(1), uint64(0)
	q := nvfp4Scaling{sr: &stochasticCasts{seed: &seed, rank: new(int), layer: layerStream("head"), count: &count}}
	transformed := transpose(vals, n, n) // what the weight gradient's casts hold: the transform of the transpose's rows
	hadamard16(transformed, n, n)
	for axis, want := range [][]float32{transpose(transformed, n, n), vals} {
		nearest := nvfp4Scaling{}.quantize(roleDY, dy, dtype.E2M1, training).along(axis)
		mean := make([]float64, len(vals))
		for range casts {
			o := q.quantize(roleDY, dy, dtype.E2M1, training).along(axis)
			for i, v := range o.t.Float32s() {
				mean[i] += float64(v*o.scale) / casts
			}
		}
		var errSR, errRN float64
		for i, v := range want {
			errSR += math.Abs(mean[i] - float64(v))
			errRN += math.Abs(float64(nearest.t.Float32s()[i]*nearest.scale) - float64(v))
		}
		if !(errSR < 0.3*errRN) {
			t.Errorf("axis %d: mean |error| of the mean of %d stochastic casts %v, want well below the cast to nearest's %v", axis, casts, errSR/(n*n), errRN/(n*n))
		}
	}
	cast := func(s, c uint64, rank int) []float32 {
		q := nvfp4Scaling{sr: &stochasticCasts{seed: &s, rank: &rank, layer: layerStream("head"), count: &c}}
		return q.quantize(roleDY, dy, dtype.E2M1, training).along(1).t.Float32s()
	}
	a, b, other, otherRank := cast(7, 5, 0), cast(7, 5, 0), cast(8, 5, 0), cast(7, 5, 1)
	same, differ, differRank := true, false, false
	for i := range a {
		same = same && a[i] == b[i]
		differ = differ || a[i] != other[i]
		differRank = differRank || a[i] != otherRank[i]
	}
	if !same || !differ || !differRank {
		t.Errorf("casts with seed 7 twice equal: %v; with seed 7 and 8 differ: %v; on ranks 0 and 1 differ: %v; want all", same, differ, differRank)
	}
}

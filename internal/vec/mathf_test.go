package vec

import (
	"math"
	"testing"
)

// maxULPs is the error allowed erf32 and exp32 against the correctly
// rounded result.
const maxULPs = 2

// sweepStride spaces the sweeps' float32s: a prime, so that they vary in
// every mantissa bit, small enough for about 11 million of each sign.
const sweepStride = 97

func TestErf32(t *testing.T) {
	t.Parallel()
	// Edges: the branch to erfTail, the clamp, where erf starts rounding
	// to 1, the smallest subnormal and the largest float.
	ulps, at := worstULPs(erf32, math.Erf, 2*erfOne, 2, erfOne, 3.8325, math.SmallestNonzeroFloat32, math.MaxFloat32)
	t.Logf("erf32: at most %d ulp from math.Erf rounded, at %g", ulps, at)
	if ulps > maxULPs {
		t.Errorf("erf32(%g) = %g is %d ulp from %g", at, erf32(at), ulps, float32(math.Erf(float64(at))))
	}
	for _, c := range []struct{ x, want float32 }{
		{0, 0}, {negZero, negZero}, {inf, 1}, {-inf, -1}, {nan, nan},
	} {
		if got := erf32(c.x); !identical(got, c.want) {
			t.Errorf("erf32(%g) = %g, want %g", c.x, got, c.want)
		}
	}
}

func TestExp32(t *testing.T) {
	t.Parallel()
	// Edges: the clamps, where e^x underflows to 0 and overflows, the
	// smallest normal result, the smallest subnormal and the largest float.
	ulps, at := worstULPs(exp32, math.Exp, 110, -expMin, expMax, 103.97208, 88.72284, 87.33655,
		math.SmallestNonzeroFloat32, math.MaxFloat32)
	t.Logf("exp32: at most %d ulp from math.Exp rounded, at %g", ulps, at)
	if ulps > maxULPs {
		t.Errorf("exp32(%g) = %g is %d ulp from %g", at, exp32(at), ulps, float32(math.Exp(float64(at))))
	}
	for _, c := range []struct{ x, want float32 }{
		{0, 1}, {negZero, 1}, {inf, inf}, {-inf, 0}, {nan, nan},
	} {
		if got := exp32(c.x); !identical(got, c.want) {
			t.Errorf("exp32(%g) = %g, want %g", c.x, got, c.want)
		}
	}
}

var (
	negZero = float32(math.Copysign(0, -1))
	inf     = float32(math.Inf(1))
	nan     = float32(math.NaN())
)

// identical reports whether a and b are the same float32, telling -0 from
// +0 and taking NaNs as equal.
func identical(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

// worstULPs returns the largest distance, in float32 steps, of f(x) from
// ref(x) rounded to float32, and an x where it is, over every
// sweepStride-th float32 in [0, hi], the floats within 16 steps of each
// edge, and the negations of all these.
func worstULPs(f func(float32) float32, ref func(float64) float64, hi float32, edges ...float32) (ulps int64, at float32) {
	check := func(x float32) {
		for _, x := range []float32{x, -x} {
			if d := ulpDistance(f(x), float32(ref(float64(x)))); d > ulps {
				ulps, at = d, x
			}
		}
	}
	for b := uint32(0); b <= math.Float32bits(hi); b += sweepStride {
		check(math.Float32frombits(b))
	}
	for _, e := range edges {
		x := e
		for range 16 {
			x = math.Nextafter32(x, 0)
		}
		for range 33 {
			check(x)
			x = math.Nextafter32(x, inf)
		}
	}
	return ulps, at
}

// ulpDistance returns how many float32 steps lie between a and b, with
// -0 and +0 one float and ±Inf one step past ±MaxFloat32.
func ulpDistance(a, b float32) int64 {
	return abs(ordinal(a) - ordinal(b))
}

// ordinal numbers the float32s (not NaN) in order, 0 for ±0.
func ordinal(f float32) int64 {
	o := int64(int32(math.Float32bits(f)))
	if o < 0 {
		o = math.MinInt32 - o
	}
	return o
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

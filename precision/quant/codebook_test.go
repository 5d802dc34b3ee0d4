package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// bnbNF4 and bnbFP4 are get_4bit_type("nf4") and get_4bit_type("fp4") of
// bitsandbytes/functional.py, typed in from the source: FP4's table is
// divided by its absmax (12) in float32, as get_4bit_type does.
var (
	bnbNF4 = []float64{
		-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
		-0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
		0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
		0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
	}
	bnbFP4 = []float64{0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0, -0, -0.0625, -8.0, -12.0, -4.0, -6.0, -2.0, -3.0}
)

func TestCodebookValues(t *testing.T) {
	for code := range uint8(16) {
		if got, want := NF4.Value(code), float32(bnbNF4[code]); got != want {
			t.Errorf("NF4 code %#04b decodes to %v, bitsandbytes %v", code, got, want)
		}
		if got, want := FP4.Value(code), float32(bnbFP4[code])/12; got != want {
			t.Errorf("FP4 code %#04b decodes to %v, bitsandbytes %v", code, got, want)
		}
	}
	if NF4.Value(0x17) != NF4.Value(7) {
		t.Error("Value looks at more than the low 4 bits")
	}
}

// TestEncodeTableValues checks that every table value encodes to a code
// of that value: the code itself, except FP4's second zero.
func TestEncodeTableValues(t *testing.T) {
	for _, cb := range []*Codebook{NF4, FP4} {
		for code := range uint8(16) {
			v := cb.Value(code)
			if got := cb.Encode(v); got != code && cb.Value(got) != v {
				t.Errorf("%s: %v encodes to %#04b (%v), want %#04b", cb.Name(), v, got, cb.Value(got), code)
			}
		}
	}
}

// TestEncodeNearest checks Encode against a search of the whole table on
// random values in [-1, 1]. FP4's pivots are bitsandbytes' literals, a few
// ulps off the midpoints, hence the slack.
func TestEncodeNearest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, cb := range []*Codebook{NF4, FP4} {
		for range 100000 {
			x := float32(2*rng.Float64() - 1)
			best := math.Inf(1)
			for code := range uint8(16) {
				best = min(best, math.Abs(float64(x-cb.Value(code))))
			}
			got := cb.Encode(x)
			if d := math.Abs(float64(x - cb.Value(got))); d > best+1e-6 {
				t.Fatalf("%s: %v encodes to %#04b (%v), %v away; the nearest value is %v away", cb.Name(), x, got, cb.Value(got), d, best)
			}
		}
	}
}

// TestEncodeBoundaries checks the tie rule of bitsandbytes' trees: a value
// on a pivot takes the code of smaller magnitude, the next float32 up (in
// magnitude) the other; NaN takes code 0.
func TestEncodeBoundaries(t *testing.T) {
	for i, p := range nf4Pivots {
		if got := NF4.Encode(p); got != uint8(i) {
			t.Errorf("NF4 pivot %v encodes to %d, want %d", p, got, i)
		}
		if got := NF4.Encode(math.Nextafter32(p, 2)); got != uint8(i+1) {
			t.Errorf("NF4 just above pivot %v encodes to %d, want %d", p, got, i+1)
		}
	}
	for i, p := range fp4Pivots {
		for _, sign := range []float32{1, -1} {
			lo, hi := fp4Codes[i], fp4Codes[i+1]
			if sign < 0 {
				lo, hi = lo|0b1000, hi|0b1000
			}
			if got := FP4.Encode(sign * p); got != lo {
				t.Errorf("FP4 pivot %v encodes to %#04b, want %#04b", sign*p, got, lo)
			}
			if got := FP4.Encode(math.Nextafter32(sign*p, sign*2)); got != hi {
				t.Errorf("FP4 just beyond pivot %v encodes to %#04b, want %#04b", sign*p, got, hi)
			}
		}
	}
	nan := float32(math.NaN())
	if NF4.Encode(nan) != 0 || FP4.Encode(nan) != 0 {
		t.Errorf("NaN encodes to %d (NF4) and %d (FP4), want 0 as bitsandbytes' trees give", NF4.Encode(nan), FP4.Encode(nan))
	}
}

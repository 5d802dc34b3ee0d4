package tensor_test

import (
	"math"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// TestClampInPlace: every element ends in [lo, hi], rounded to the
// tensor's dtype as a cast of the float32 bound is; those inside are
// untouched and NaN stays NaN, in every floating dtype.
func TestClampInPlace(t *testing.T) {
	in := []float64{-3, -0.25, 0, 0.125, 2.5, math.Inf(1), math.NaN()}
	for _, dt := range []dtype.DType{dtype.F64, dtype.F32, dtype.BF16, dtype.F16} {
		x := tensor.FromFloat64(in, len(in)).To(dt)
		x.ClampInPlace(-0.3, 1.1)
		lo, hi := float64(dt.Round(float32(-0.3))), float64(dt.Round(float32(1.1)))
		if dt == dtype.F64 {
			lo, hi = -0.3, 1.1
		}
		want := []float64{lo, -0.25, 0, 0.125, hi, hi}
		got := x.Float64s()
		for i, w := range want {
			if got[i] != w {
				t.Errorf("%s: element %d (%v) clamped to %v, want %v", dt, i, in[i], got[i], w)
			}
		}
		if !math.IsNaN(got[len(got)-1]) {
			t.Errorf("%s: NaN clamped to %v", dt, got[len(got)-1])
		}
	}
}

//go:build weftpoison

package tensor

import (
	"math"
	"testing"

	"github.com/weftml/weft/dtype"
)

// TestPoisonedPool: under weftpoison, scratch and empty storage read as NaN
// in every float dtype, buffers given back are NaN for whoever still holds
// them, and New still zeroes.
func TestPoisonedPool(t *testing.T) {
	s := scratch[float32](5)
	s[0] = 1
	release(s)
	if v := s[:1][0]; !math.IsNaN(float64(v)) {
		t.Errorf("a released buffer still reads %v", v)
	}
	for _, v := range scratch[float64](7) {
		if !math.IsNaN(v) {
			t.Fatalf("scratch holds %v, want NaN", v)
		}
	}
	big := scratch[float32](slabMin) // a slab block
	for i := range big {
		if !math.IsNaN(float64(big[i])) {
			t.Fatalf("slab block element %d holds %v, want NaN", i, big[i])
		}
		big[i] = 1
	}
	release(big)
	if v := big[len(big)-1]; !math.IsNaN(float64(v)) {
		t.Errorf("a released slab block still reads %v", v)
	}
	for _, dt := range []dtype.DType{dtype.F64, dtype.F32, dtype.BF16, dtype.F16, dtype.E4M3FN, dtype.E5M2} {
		x := empty(dt, 3, 5)
		for i, v := range x.Float64s() {
			if !math.IsNaN(v) {
				t.Errorf("%v: empty element %d is %v, want NaN", dt, i, v)
			}
		}
		Release(x)
		for i, v := range New(dt, 3, 5).Float64s() {
			if v != 0 {
				t.Errorf("%v: New element %d is %v, want 0", dt, i, v)
			}
		}
	}
}

package tensor

import (
	"fmt"
	"math"

	"github.com/weftml/weft/dtype"
)

// Rotary applies rotary position embeddings to x (..., T, hs) as HF's
// Llama does (rotate_half): with h = hs/2 and, for position t and pair i < h,
// the angle a = t·theta^(−2i/hs),
//
//	y[i]   = x[i]·cos a − x[i+h]·sin a
//	y[i+h] = x[i+h]·cos a + x[i]·sin a
//
// so that each (i, i+h) pair turns by a. inverse turns by −a: the backward
// pass (a rotation's transpose is its inverse). The angles and their sines
// are computed in float64; the products in the compute type.
func Rotary(x *Tensor, theta float64, inverse bool) *Tensor {
	if len(x.shape) < 2 || x.Dim(-1)%2 != 0 {
		panic(fmt.Sprintf("tensor: rotary embeddings of %v need (..., T, hs) with hs even", x))
	}
	if x.meta {
		return Meta(x.dtype, x.shape...)
	}
	y := empty(x.dtype, x.shape...)
	if x.dtype == dtype.F64 {
		rotary[float64](y, x, theta, inverse)
	} else {
		rotary[float32](y, x, theta, inverse)
	}
	return y
}

func rotary[T float](y, x *Tensor, theta float64, inverse bool) {
	t, hs := x.Dim(-2), x.Dim(-1)
	h := hs / 2
	cos, sin := scratch[T](t*h), scratch[T](t*h)
	defer release(cos)
	defer release(sin)
	for p := range t {
		for i := range h {
			s, c := math.Sincos(float64(p) * math.Pow(theta, -float64(2*i)/float64(hs)))
			if inverse {
				s = -s
			}
			cos[p*h+i], sin[p*h+i] = T(c), T(s)
		}
	}
	xs, ys := get[T](x), buf[T](y)
	for r := 0; r < len(xs); r += hs {
		p := r / hs % t
		row, out := xs[r:r+hs], ys[r:r+hs]
		for i := range h {
			c, s := cos[p*h+i], sin[p*h+i]
			out[i] = row[i]*c - row[i+h]*s
			out[i+h] = row[i+h]*c + row[i]*s
		}
	}
	put(y, ys)
	drop(x, xs)
}

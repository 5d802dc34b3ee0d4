package tensor

import (
	"fmt"
	"math"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/vec"
)

// unary returns f applied to every element of x, in x's dtype.
func unary(x *Tensor, f32 func(float32) float32, f64 func(float64) float64) *Tensor {
	if x.meta {
		return Meta(x.dtype, x.shape...)
	}
	out := empty(x.dtype, x.shape...)
	if x.dtype == dtype.F64 {
		mapInto(out, x, f64)
	} else {
		mapInto(out, x, f32)
	}
	return out
}

func mapInto[T float](out, x *Tensor, f func(T) T) {
	xs, ys := get[T](x), buf[T](out)
	for i, v := range xs {
		ys[i] = f(v)
	}
	put(out, ys)
	drop(x, xs)
}

// binary returns f(a, b) elementwise for same-shaped a and b, in their promoted dtype.
func binary(a, b *Tensor, f32 func(x, y float32) float32, f64 func(x, y float64) float64) *Tensor {
	mustSameShape("binary op", a, b)
	if anyMeta(a, b) {
		return Meta(Promote(a.dtype, b.dtype), a.shape...)
	}
	out := empty(Promote(a.dtype, b.dtype), a.shape...)
	if out.dtype == dtype.F64 {
		zipInto(out, a, b, f64)
	} else {
		zipInto(out, a, b, f32)
	}
	return out
}

func zipInto[T float](out, a, b *Tensor, f func(x, y T) T) {
	as, bs, ys := get[T](a), get[T](b), buf[T](out)
	for i := range ys {
		ys[i] = f(as[i], bs[i])
	}
	put(out, ys)
	drop(a, as)
	drop(b, bs)
}

// Scale returns x·s, with s converted to the compute type as PyTorch does for Python scalars.
func Scale(x *Tensor, s float64) *Tensor {
	s32 := float32(s)
	return unary(x, func(v float32) float32 { return v * s32 }, func(v float64) float64 { return v * s })
}

// Mul returns a·b elementwise.
func Mul(a, b *Tensor) *Tensor {
	return binary(a, b, func(x, y float32) float32 { return x * y }, func(x, y float64) float64 { return x * y })
}

// GELU is the exact (erf) form x·Φ(x). It also returns Φ(x) for
// GELUBackward, so that erf is computed once a step. Φ is kept in the
// compute type, float64 for F64 x and float32 for all others, so the
// gradient is what computing it afresh would give.
func GELU(x *Tensor) (y, cdf *Tensor) {
	if x.meta {
		return Meta(x.dtype, x.shape...), Meta(statsDType(x.dtype), x.shape...)
	}
	y = empty(x.dtype, x.shape...)
	if x.dtype == dtype.F64 {
		cdf = empty(dtype.F64, x.shape...)
		gelu64(y, cdf, x)
	} else {
		cdf = empty(dtype.F32, x.shape...)
		gelu32(y, cdf, x)
	}
	return y, cdf
}

func gelu64(y, cdf, x *Tensor) {
	xs, ys, cs := x.f64(), y.f64(), cdf.f64()
	for i, v := range xs {
		c := 0.5 * (1 + math.Erf(v/math.Sqrt2))
		cs[i], ys[i] = c, v*c
	}
}

// gelu32 computes as PyTorch's CUDA kernel does in float32 (vec.GELU).
func gelu32(y, cdf, x *Tensor) {
	xs, ys := get[float32](x), buf[float32](y)
	vec.GELU(ys, cdf.f32(), xs)
	put(y, ys)
	drop(x, xs)
}

// GELUBackward returns dy·(Φ(x) + x·φ(x)) given GELU's Φ(x).
func GELUBackward(x, cdf, dy *Tensor) *Tensor {
	dx := empty(Promote(x.dtype, dy.dtype), x.shape...)
	if dx.dtype == dtype.F64 {
		geluBackward64(dx, x, cdf, dy)
	} else {
		geluBackward32(dx, x, cdf, dy)
	}
	return dx
}

func geluBackward64(dx, x, cdf, dy *Tensor) {
	xs, cs, gs, out := get[float64](x), get[float64](cdf), get[float64](dy), buf[float64](dx)
	for i, v := range xs {
		pdf := math.Exp(-0.5*v*v) / math.Sqrt(2*math.Pi)
		out[i] = gs[i] * (cs[i] + v*pdf)
	}
	put(dx, out)
	drop(x, xs)
	drop(cdf, cs)
	drop(dy, gs)
}

// geluBackward32 computes as PyTorch's CUDA kernel does in float32
// (vec.GELUBackward).
func geluBackward32(dx, x, cdf, dy *Tensor) {
	xs, cs, gs, out := get[float32](x), get[float32](cdf), get[float32](dy), buf[float32](dx)
	vec.GELUBackward(out, xs, cs, gs)
	put(dx, out)
	drop(x, xs)
	drop(cdf, cs)
	drop(dy, gs)
}

// ReLU returns max(x, 0).
func ReLU(x *Tensor) *Tensor {
	if x.meta {
		return Meta(x.dtype, x.shape...)
	}
	out := empty(x.dtype, x.shape...)
	if x.dtype == dtype.F64 {
		relu[float64](out, x)
	} else {
		relu[float32](out, x)
	}
	return out
}

func relu[T float](out, x *Tensor) {
	xs, ys := get[T](x), buf[T](out)
	if y32, ok := any(ys).([]float32); ok {
		vec.ReLU(y32, any(xs).([]float32))
	} else {
		for i, v := range xs {
			ys[i] = max(v, 0)
		}
	}
	put(out, ys)
	drop(x, xs)
}

// ReLUBackward returns dy where y > 0 and 0 elsewhere (y is ReLU's output).
func ReLUBackward(y, dy *Tensor) *Tensor {
	mustSameShape("ReLUBackward", y, dy)
	dx := empty(Promote(y.dtype, dy.dtype), y.shape...)
	if dx.dtype == dtype.F64 {
		reluBackward[float64](dx, y, dy)
	} else {
		reluBackward[float32](dx, y, dy)
	}
	return dx
}

func reluBackward[T float](dx, y, dy *Tensor) {
	ys, gs, out := get[T](y), get[T](dy), buf[T](dx)
	if o32, ok := any(out).([]float32); ok {
		vec.ReLUBackward(o32, any(ys).([]float32), any(gs).([]float32))
	} else {
		gs = gs[:len(ys)]
		for i, v := range ys {
			out[i] = gs[i]
			if v <= 0 {
				out[i] = 0
			}
		}
	}
	put(dx, out)
	drop(y, ys)
	drop(dy, gs)
}

// CausalMask fills the entries above the diagonal of the last two axes
// with fill (PyTorch's masked_fill with a triu mask).
func CausalMask(x *Tensor, fill float64) *Tensor {
	rows, cols := x.Dim(-2), x.Dim(-1)
	if x.meta {
		return Meta(x.dtype, x.shape...)
	}
	out := x.Clone()
	if out.dtype == dtype.F64 {
		maskInto(view[float64](out), rows, cols, fill)
	} else {
		vals := get[float32](out)
		maskInto(vals, rows, cols, float32(fill))
		put(out, vals)
	}
	return out
}

func maskInto[T float](vals []T, rows, cols int, fill T) {
	for m := 0; m < len(vals); m += rows * cols {
		for i := range rows {
			for j := i + 1; j < cols; j++ {
				vals[m+i*cols+j] = fill
			}
		}
	}
}

// AddBroadcast returns a + b, where b's shape equals a's axes [from,
// from+rank(b)) and b repeats over the others: a bias over channels (from=1
// of NCHW), over features (from=rank-1) or a position table (from=1 of BTC).
func AddBroadcast(a, b *Tensor, from int) *Tensor {
	outer, mid, inner := broadcastDims(a.shape, b.shape, from)
	if anyMeta(a, b) {
		return Meta(Promote(a.dtype, b.dtype), a.shape...)
	}
	out := empty(Promote(a.dtype, b.dtype), a.shape...)
	if out.dtype == dtype.F64 {
		addBroadcast[float64](out, a, b, outer, mid, inner)
	} else {
		addBroadcast[float32](out, a, b, outer, mid, inner)
	}
	return out
}

func addBroadcast[T float](out, a, b *Tensor, outer, mid, inner int) {
	as, bs, ys := get[T](a), get[T](b), buf[T](out)
	for o := range outer {
		if inner == 1 { // b spans the innermost axes: add it row by row
			x, y := as[o*mid:][:mid], ys[o*mid:][:mid]
			for m, v := range bs[:mid] {
				y[m] = x[m] + v
			}
			continue
		}
		for m, v := range bs[:mid] {
			base := (o*mid + m) * inner
			x, y := as[base:][:inner], ys[base:][:inner]
			for i := range y {
				y[i] = x[i] + v
			}
		}
	}
	put(out, ys)
	drop(a, as)
	drop(b, bs)
}

// ReduceBroadcast sums dy over the axes a tensor of shape was repeated over
// by AddBroadcast: its gradient, accumulated in the compute type and rounded
// once to dt.
func ReduceBroadcast(dy *Tensor, shape []int, from int, dt dtype.DType) *Tensor {
	outer, mid, inner := broadcastDims(dy.shape, shape, from)
	out := New(dt, shape...)
	if dt == dtype.F64 || dy.dtype == dtype.F64 {
		reduceBroadcast[float64](out, dy, outer, mid, inner)
	} else {
		reduceBroadcast[float32](out, dy, outer, mid, inner)
	}
	return out
}

func reduceBroadcast[T float](out, dy *Tensor, outer, mid, inner int) {
	gs, sums := get[T](dy), scratch[T](mid)
	clear(sums)
	for o := range outer {
		if inner == 1 {
			for m, g := range gs[o*mid:][:mid] {
				sums[m] += g
			}
			continue
		}
		for m := range sums {
			base := (o*mid + m) * inner
			s := sums[m]
			for _, g := range gs[base : base+inner] {
				s += g
			}
			sums[m] = s
		}
	}
	storeAs(out, sums)
	release(sums)
	drop(dy, gs)
}

// storeAs rounds vals ([]float32 or []float64) into out, whatever out's dtype.
func storeAs(out *Tensor, vals any) {
	switch v := vals.(type) {
	case []float64:
		dtype.EncodeF64(out.dtype, out.data, v, false)
	case []float32:
		if out.dtype == dtype.F64 {
			for i, x := range v {
				out.f64()[i] = float64(x)
			}
			return
		}
		dtype.Encode(out.dtype, out.data, v, false)
	}
}

func broadcastDims(a, b []int, from int) (outer, mid, inner int) {
	if from < 0 || from+len(b) > len(a) || !EqualShape(a[from:from+len(b)], b) {
		panic(fmt.Sprintf("tensor: cannot broadcast %v into %v at axis %d", b, a, from))
	}
	return Numel(a[:from]), Numel(b), Numel(a[from+len(b):])
}

// Add returns a + b for same-shaped tensors.
func Add(a, b *Tensor) *Tensor { return AddBroadcast(a, b, 0) }

// GELUTanh is GPT-2's approximation of GELU (PyTorch's approximate="tanh",
// HF's "gelu_new"): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), evaluated
// in float64 for every dtype and rounded once.
func GELUTanh(x *Tensor) *Tensor {
	return unary(x, func(v float32) float32 { return float32(geluTanh(float64(v))) }, geluTanh)
}

// GELUTanhBackward returns dy·d/dx GELUTanh(x).
func GELUTanhBackward(x, dy *Tensor) *Tensor {
	return binary(x, dy, func(v, g float32) float32 { return float32(float64(g) * geluTanhSlope(float64(v))) },
		func(v, g float64) float64 { return g * geluTanhSlope(v) })
}

// geluTanhK is √(2/π).
const geluTanhK = 0.7978845608028654

func geluTanh(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(geluTanhK*(x+0.044715*x*x*x)))
}

// geluTanhSlope is ½(1+t) + ½x(1−t²)·√(2/π)(1 + 3·0.044715·x²), t the tanh above.
func geluTanhSlope(x float64) float64 {
	t := math.Tanh(geluTanhK * (x + 0.044715*x*x*x))
	return 0.5*(1+t) + 0.5*x*(1-t*t)*geluTanhK*(1+3*0.044715*x*x)
}

// SiLU is x·σ(x) (Llama's activation), evaluated in float64 for every
// dtype and rounded once.
func SiLU(x *Tensor) *Tensor {
	return unary(x, func(v float32) float32 { return float32(silu(float64(v))) }, silu)
}

// SiLUBackward returns dy·σ(x)·(1 + x·(1−σ(x))).
func SiLUBackward(x, dy *Tensor) *Tensor {
	return binary(x, dy, func(v, g float32) float32 { return float32(float64(g) * siluSlope(float64(v))) },
		func(v, g float64) float64 { return g * siluSlope(v) })
}

func silu(x float64) float64 { return x / (1 + math.Exp(-x)) }

func siluSlope(x float64) float64 {
	s := 1 / (1 + math.Exp(-x))
	return s * (1 + x*(1-s))
}

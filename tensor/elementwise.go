package tensor

import (
	"fmt"
	"math"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/vec"
)

// Scale returns x·s, with s converted to the compute type as PyTorch does for Python scalars.
func Scale(x *Tensor, s float64) *Tensor {
	if x.meta {
		return Meta(x.dtype, x.shape...)
	}
	out := empty(x.dtype, x.shape...)
	if x.dtype == dtype.F64 {
		scaleInto(out, x, s)
	} else {
		scaleInto(out, x, float32(s))
	}
	return out
}

func scaleInto[T float](out, x *Tensor, s T) {
	xs, ys := get[T](x), buf[T](out)
	scaleAll(ys, xs, s)
	put(out, ys)
	drop(x, xs)
}

// scaleAll sets ys to xs·s, split across cores when large.
func scaleAll[T float](ys, xs []T, s T) {
	if parallelParts(len(xs)) <= 1 {
		scaleRange(ys, xs, s)
	} else {
		parallelFor(len(xs), func(lo, hi int) { scaleRange(ys[lo:hi], xs[lo:hi], s) })
	}
}

func scaleRange[T float](ys, xs []T, s T) {
	for i, v := range xs {
		ys[i] = v * s
	}
}

// Mul returns a·b elementwise.
func Mul(a, b *Tensor) *Tensor {
	mustSameShape("binary op", a, b)
	if anyMeta(a, b) {
		return Meta(Promote(a.dtype, b.dtype), a.shape...)
	}
	out := empty(Promote(a.dtype, b.dtype), a.shape...)
	if out.dtype == dtype.F64 {
		mulInto[float64](out, a, b)
	} else {
		mulInto[float32](out, a, b)
	}
	return out
}

func mulInto[T float](out, a, b *Tensor) {
	as, bs, ys := get[T](a), get[T](b), buf[T](out)
	if parallelParts(len(ys)) <= 1 {
		mulRange(ys, as, bs)
	} else {
		parallelFor(len(ys), func(lo, hi int) { mulRange(ys[lo:hi], as[lo:hi], bs[lo:hi]) })
	}
	put(out, ys)
	drop(a, as)
	drop(b, bs)
}

func mulRange[T float](ys, as, bs []T) {
	for i := range ys {
		ys[i] = as[i] * bs[i]
	}
}

// GELU is the exact (erf) form x·Φ(x), computed in float64 for F64 x and
// in float32 for all others.
func GELU(x *Tensor) *Tensor {
	if x.meta {
		return Meta(x.dtype, x.shape...)
	}
	y := empty(x.dtype, x.shape...)
	if x.dtype == dtype.F64 {
		gelu64(y, x)
	} else {
		gelu32(y, x)
	}
	return y
}

// geluBlock is how many elements of Φ(x) the GELU kernels hold at a time,
// on the stack: GELUBackward computes Φ again rather than have GELU keep
// a tensor of it, as PyTorch's backward does.
const geluBlock = 256

func gelu64(y, x *Tensor) {
	xs, ys := x.f64(), y.f64()
	if parallelParts(len(xs)) <= 1 {
		gelu64Range(ys, xs)
	} else {
		parallelFor(len(xs), func(lo, hi int) { gelu64Range(ys[lo:hi], xs[lo:hi]) })
	}
}

func gelu64Range(ys, xs []float64) {
	for i, v := range xs {
		ys[i] = v * phi64(v)
	}
}

// phi64 is Φ(v) as the float64 GELU computes it.
func phi64(v float64) float64 { return 0.5 * (1 + math.Erf(v/math.Sqrt2)) }

// gelu32 computes as PyTorch's CUDA kernel does in float32 (vec.GELU).
func gelu32(y, x *Tensor) {
	xs, ys := get[float32](x), buf[float32](y)
	if parallelParts(len(xs)) <= 1 {
		gelu32Range(ys, xs)
	} else {
		parallelFor(len(xs), func(lo, hi int) { gelu32Range(ys[lo:hi], xs[lo:hi]) })
	}
	put(y, ys)
	drop(x, xs)
}

func gelu32Range(ys, xs []float32) {
	var cdf [geluBlock]float32
	for i := 0; i < len(xs); i += geluBlock {
		j := min(i+geluBlock, len(xs))
		vec.GELU(ys[i:j], cdf[:j-i], xs[i:j])
	}
}

// GELUBackward returns dy·(Φ(x) + x·φ(x)), with Φ(x) computed again as
// GELU computes it (in x's compute type): the gradient is the one a kept
// Φ would give.
func GELUBackward(x, dy *Tensor) *Tensor {
	dx := empty(Promote(x.dtype, dy.dtype), x.shape...)
	if dx.dtype == dtype.F64 {
		geluBackward64(dx, x, dy)
	} else {
		geluBackward32(dx, x, dy)
	}
	return dx
}

func geluBackward64(dx, x, dy *Tensor) {
	xs, gs, out := get[float64](x), get[float64](dy), buf[float64](dx)
	phi32 := x.dtype != dtype.F64 // GELU computed x's Φ in float32
	if parallelParts(len(xs)) <= 1 {
		geluBackward64Range(out, xs, gs, phi32)
	} else {
		parallelFor(len(xs), func(lo, hi int) { geluBackward64Range(out[lo:hi], xs[lo:hi], gs[lo:hi], phi32) })
	}
	put(dx, out)
	drop(x, xs)
	drop(dy, gs)
}

// geluBackward64Range takes Φ(x) in float32 from vec.GELU when phi32 (xs
// are then float32 values), else from phi64.
func geluBackward64Range(out, xs, gs []float64, phi32 bool) {
	var cdf [geluBlock]float64
	var x32, y32, c32 [geluBlock]float32
	for i := 0; i < len(xs); i += geluBlock {
		xb := xs[i:min(i+geluBlock, len(xs))]
		if phi32 {
			for k, v := range xb {
				x32[k] = float32(v)
			}
			vec.GELU(y32[:len(xb)], c32[:len(xb)], x32[:len(xb)])
			for k, c := range c32[:len(xb)] {
				cdf[k] = float64(c)
			}
		} else {
			for k, v := range xb {
				cdf[k] = phi64(v)
			}
		}
		for k, v := range xb {
			pdf := math.Exp(-0.5*v*v) / math.Sqrt(2*math.Pi)
			out[i+k] = gs[i+k] * (cdf[k] + v*pdf)
		}
	}
}

// geluBackward32 computes as PyTorch's CUDA kernel does in float32
// (vec.GELUBackward).
func geluBackward32(dx, x, dy *Tensor) {
	xs, gs, out := get[float32](x), get[float32](dy), buf[float32](dx)
	if parallelParts(len(xs)) <= 1 {
		geluBackward32Range(out, xs, gs)
	} else {
		parallelFor(len(xs), func(lo, hi int) { geluBackward32Range(out[lo:hi], xs[lo:hi], gs[lo:hi]) })
	}
	put(dx, out)
	drop(x, xs)
	drop(dy, gs)
}

func geluBackward32Range(out, xs, gs []float32) {
	var y, cdf [geluBlock]float32
	for i := 0; i < len(xs); i += geluBlock {
		j := min(i+geluBlock, len(xs))
		vec.GELU(y[:j-i], cdf[:j-i], xs[i:j])
		vec.GELUBackward(out[i:j], xs[i:j], cdf[:j-i], gs[i:j])
	}
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
	if parallelParts(len(xs)) <= 1 {
		reluRange(ys, xs)
	} else {
		parallelFor(len(xs), func(lo, hi int) { reluRange(ys[lo:hi], xs[lo:hi]) })
	}
	put(out, ys)
	drop(x, xs)
}

func reluRange[T float](ys, xs []T) {
	if y32, ok := any(ys).([]float32); ok {
		vec.ReLU(y32, any(xs).([]float32))
		return
	}
	for i, v := range xs {
		ys[i] = max(v, 0)
	}
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
	if parallelParts(len(ys)) <= 1 {
		reluBackwardRange(out, ys, gs)
	} else {
		parallelFor(len(ys), func(lo, hi int) { reluBackwardRange(out[lo:hi], ys[lo:hi], gs[lo:hi]) })
	}
	put(dx, out)
	drop(y, ys)
	drop(dy, gs)
}

func reluBackwardRange[T float](out, ys, gs []T) {
	if o32, ok := any(out).([]float32); ok {
		vec.ReLUBackward(o32, any(ys).([]float32), any(gs).([]float32))
		return
	}
	gs = gs[:len(ys)]
	for i, v := range ys {
		out[i] = gs[i]
		if v <= 0 {
			out[i] = 0
		}
	}
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
	// Work is split in units: rows of b when b spans the innermost axes,
	// else runs of inner elements that add one value of b.
	units := outer * mid
	if inner == 1 {
		units = outer
	}
	if parts := min(parallelParts(len(ys)), units); parts <= 1 {
		addBroadcastUnits(ys, as, bs[:mid], inner, 0, units)
	} else {
		parallelSplit(units, parts, func(lo, hi int) { addBroadcastUnits(ys, as, bs[:mid], inner, lo, hi) })
	}
	put(out, ys)
	drop(a, as)
	drop(b, bs)
}

// addBroadcastUnits adds bs to the units [lo, hi) of as (see addBroadcast).
func addBroadcastUnits[T float](ys, as, bs []T, inner, lo, hi int) {
	mid := len(bs)
	if inner == 1 { // b spans the innermost axes: add it row by row
		for o := lo; o < hi; o++ {
			x, y := as[o*mid:][:mid], ys[o*mid:][:mid]
			for m, v := range bs {
				y[m] = x[m] + v
			}
		}
		return
	}
	for u := lo; u < hi; u++ {
		v := bs[u%mid]
		x, y := as[u*inner:][:inner], ys[u*inner:][:inner]
		for i := range y {
			y[i] = x[i] + v
		}
	}
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

// reduceBroadcast splits the sums across cores by ranges of b's elements,
// each summed over o and then i in order whatever the split: the same bits
// on any number of cores.
func reduceBroadcast[T float](out, dy *Tensor, outer, mid, inner int) {
	gs, sums := get[T](dy), scratch[T](mid)
	clear(sums)
	if parts := min(parallelParts(len(gs)), mid); parts <= 1 {
		reduceBroadcastRange(sums, gs, outer, inner, 0, mid)
	} else {
		parallelSplit(mid, parts, func(lo, hi int) { reduceBroadcastRange(sums, gs, outer, inner, lo, hi) })
	}
	storeAs(out, sums)
	release(sums)
	drop(dy, gs)
}

// reduceBroadcastRange accumulates sums[lo:hi] over dy's elements gs.
func reduceBroadcastRange[T float](sums, gs []T, outer, inner, lo, hi int) {
	if inner == 1 {
		sumColumns(sums[lo:hi], gs, len(sums), lo)
		return
	}
	mid := len(sums)
	for o := range outer {
		for m := lo; m < hi; m++ {
			base := (o*mid + m) * inner
			s := sums[m]
			for _, g := range gs[base : base+inner] {
				s += g
			}
			sums[m] = s
		}
	}
}

// sumColumns adds to sums, row after row, the columns [lo, lo+len(sums))
// of gs's rows of c elements.
func sumColumns[T float](sums, gs []T, c, lo int) {
	for r := lo; r < len(gs); r += c {
		vec.Add(sums, gs[r:][:len(sums)])
	}
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

// unary returns f applied to every element of x, in x's dtype, split
// across cores when large: for functions evaluated in float64 whatever the
// dtype, whose cost is the function, not the loop.
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
	parallelFor(len(xs), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			ys[i] = f(xs[i])
		}
	})
	put(out, ys)
	drop(x, xs)
}

// binary returns f(a, b) elementwise for same-shaped a and b, in their
// promoted dtype, split across cores as unary is.
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
	parallelFor(len(ys), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			ys[i] = f(as[i], bs[i])
		}
	})
	put(out, ys)
	drop(a, as)
	drop(b, bs)
}

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

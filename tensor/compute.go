package tensor

import (
	"unsafe"

	"github.com/weftml/weft/dtype"
)

// float is the set of compute types: float64 for F64 tensors, float32 for all others.
type float interface{ float32 | float64 }

// isF64 reports whether the compute type T is float64.
func isF64[T float]() bool {
	var z T
	_, ok := any(z).(float64)
	return ok
}

// native reports whether t stores T itself, so its storage can be viewed directly.
func native[T float](t *Tensor) bool {
	if isF64[T]() {
		return t.dtype == dtype.F64
	}
	return t.dtype == dtype.F32
}

// view reinterprets t's storage as []T; t must be native for T (and not
// meta: get and buf check).
func view[T float](t *Tensor) []T {
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(t.data))), len(t.data)/int(unsafe.Sizeof(z)))
}

// get returns t's elements in compute type T: a view of the storage when t
// stores T, otherwise a decoded copy in pooled scratch, which the caller
// may hand back with drop once done with it.
func get[T float](t *Tensor) []T {
	t.stored("a kernel")
	if native[T](t) {
		return view[T](t)
	}
	n := t.Len()
	if isF64[T]() {
		out := scratch[float64](n)
		convert(t.dtype, out, t.data, false, decodeF64)
		return any(out).([]T)
	}
	out := scratch[float32](n)
	if t.dtype == dtype.F64 {
		convert(t.dtype, out, t.data, false, narrowF64)
	} else {
		convert(t.dtype, out, t.data, false, decodeF32)
	}
	return any(out).([]T)
}

// buf returns a []T to compute t's new elements into: t's own storage when
// it stores T, otherwise scratch that put encodes back.
func buf[T float](t *Tensor) []T {
	t.stored("a kernel")
	if native[T](t) {
		return view[T](t)
	}
	return scratch[T](t.Len())
}

// put rounds vals (from buf or get) into t's storage and releases the
// scratch; a no-op for native tensors.
func put[T float](t *Tensor, vals []T) {
	if native[T](t) {
		return
	}
	switch v := any(vals).(type) {
	case []float64:
		convert(t.dtype, v, t.data, false, encodeF64)
	case []float32:
		encode(t.dtype, t.data, v, false)
	}
	release(vals)
}

// encode is dtype.Encode split across cores for large byte-addressable tensors.
func encode(dt dtype.DType, dst []byte, src []float32, sat bool) {
	convert(dt, src, dst, sat, encodeF32)
}

// convert runs f, one of the conversions below, over vals and data (the
// codes of vals in dt), split into element ranges across cores when they
// are large and byte-addressable (ranges would split the bytes of packed
// 4-bit codes). Each element converts alone, so the split changes no bits.
// f is a plain function, not a closure, so that the single range
// allocates nothing.
func convert[T float](dt dtype.DType, vals []T, data []byte, sat bool, f func(dtype.DType, []T, []byte, bool)) {
	size := dt.Bits() / 8
	if size == 0 || parallelParts(len(vals)) <= 1 {
		f(dt, vals, data, sat)
		return
	}
	parallelFor(len(vals), func(lo, hi int) { f(dt, vals[lo:hi], data[lo*size:hi*size], sat) })
}

// The conversions convert runs, in one argument order.

func encodeF32(dt dtype.DType, src []float32, dst []byte, sat bool) {
	dtype.Encode(dt, dst, src, sat)
}

func encodeF64(dt dtype.DType, src []float64, dst []byte, sat bool) {
	dtype.EncodeF64(dt, dst, src, sat)
}

func decodeF32(dt dtype.DType, dst []float32, src []byte, _ bool) {
	dtype.Decode(dt, dst, src)
}

func decodeF64(dt dtype.DType, dst []float64, src []byte, _ bool) {
	dtype.DecodeF64(dt, dst, src)
}

// narrowF64 rounds float64 codes (dt is F64) to float32.
func narrowF64(_ dtype.DType, dst []float32, src []byte, _ bool) {
	for i, v := range unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(src))), len(dst)) {
		dst[i] = float32(v)
	}
}

// Promote returns the dtype PyTorch gives an op over inputs of dtypes a and
// b: the wider float, with bf16 and f16 together promoting to f32.
func Promote(a, b dtype.DType) dtype.DType {
	switch {
	case a == b:
		return a
	case a == dtype.F64 || b == dtype.F64:
		return dtype.F64
	default:
		return dtype.F32
	}
}

func promoteAll(ts ...*Tensor) dtype.DType {
	dt := ts[0].dtype
	for _, t := range ts[1:] {
		if t != nil {
			dt = Promote(dt, t.dtype)
		}
	}
	return dt
}

// rounding rounds compute values to a storage dtype after each op of a
// multi-op kernel (the optimizer); for float32 and float64 storage it does
// nothing, and do inlines to nothing.
type rounding[T float] struct {
	dt dtype.DType
	on bool
}

func roundTo[T float](dt dtype.DType) rounding[T] {
	return rounding[T]{dt: dt, on: dt != dtype.F64 && dt != dtype.F32}
}

func (r rounding[T]) do(x T) T {
	if !r.on {
		return x
	}
	return T(r.dt.Round(float32(x)))
}

// all rounds every element of xs; float32 slices take dtype's bulk rounding,
// which skips Round's per-element dispatch.
func (r rounding[T]) all(xs []T) {
	if !r.on {
		return
	}
	if x32, ok := any(xs).([]float32); ok {
		dtype.RoundFloat32s(r.dt, x32)
		return
	}
	for i, x := range xs {
		xs[i] = T(r.dt.Round(float32(x)))
	}
}

// Package tensor holds n-dimensional arrays whose bytes live in their storage
// dtype (a bf16 tensor takes 2 bytes per element) and the CPU kernels that
// compute on them. Arithmetic is emulated the way a tensor core does it:
// inputs are decoded to float32 (float64 for F64 tensors), accumulated in that
// type, and every op rounds its result once to the output dtype.
package tensor

import (
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/weftml/weft/dtype"
)

// Tensor is a dense, row-major array. Ops never modify their inputs; only the
// explicitly in-place methods (used by optimizers) write into a tensor.
type Tensor struct {
	shape []int
	dims  [4]int // holds shape when it has at most 4 axes, saving an allocation
	dtype dtype.DType
	data  []byte
	// pooled is the pool buffer data lives in, for New's tensors; views
	// (Reshape, Flat) and wrapped slices have none.
	pooled []float64
	// base is the tensor a view (Reshape, Flat) shows the storage of.
	base *Tensor
	// freed marks a header Free has recycled, so that freeing it twice
	// cannot hand it out twice.
	freed bool
	// meta marks a tensor without storage (Meta).
	meta bool
}

// header returns a tensor of shape over data (the shape is copied), in a
// header that Free recycled when there is one.
func header(dt dtype.DType, data []byte, shape []int) *Tensor {
	t := headers.pop()
	if t == nil {
		t = new(Tensor)
	}
	*t = Tensor{dtype: dt, data: data}
	t.setShape(shape)
	return t
}

// headers are the Tensor structs Free gave back.
var headers freeList[*Tensor]

func (t *Tensor) setShape(shape []int) {
	if len(shape) <= len(t.dims) {
		t.shape = t.dims[:len(shape)]
		copy(t.shape, shape)
		return
	}
	t.shape = append([]int(nil), shape...)
}

// owner is the tensor whose storage t shows: t itself unless t is a view.
func (t *Tensor) owner() *Tensor {
	if t.base != nil {
		return t.base
	}
	return t
}

// New returns a zero-filled tensor. Its storage comes from a pool that
// Release returns it to.
func New(dt dtype.DType, shape ...int) *Tensor {
	t := empty(dt, shape...)
	clear(t.pooled)
	return t
}

// empty is New without the zeroing, for ops that write every element.
func empty(dt dtype.DType, shape ...int) *Tensor {
	n := dt.StorageBytes(Numel(shape))
	// Pool buffers are float64s, so that every float view is aligned.
	words := scratch[float64]((n + 7) / 8)
	t := header(dt, bytesOf(words)[:n], shape)
	t.pooled = words
	return t
}

// Generate returns a float32 tensor of shape whose elements fill writes,
// in pool storage: how a value drawn from an initialiser becomes a tensor
// without a garbage copy. dst starts zeroed.
func Generate(fill func(dst []float32), shape ...int) *Tensor {
	t := New(dtype.F32, shape...)
	fill(t.f32())
	return t
}

// Release returns t's storage to the pool and leaves t empty, so that a
// later use fails loudly. Only tensors from New have storage to return;
// views of them must not be used afterwards.
func Release(t *Tensor) {
	if t == nil || t.pooled == nil {
		return
	}
	release(t.pooled)
	t.pooled, t.data = nil, nil
}

// Drop gives t's storage to the garbage collector instead of the pool and
// leaves t empty, as Release does: for a buffer of a size no later step
// asks for (a model's values before a cast, a parameter once sharded),
// which the pool would keep idle for good.
func Drop(t *Tensor) {
	if t == nil || t.pooled == nil {
		return
	}
	forget(t.pooled)
	t.pooled, t.data = nil, nil
}

// Free releases t's storage, as Release does, and recycles t itself for a
// later tensor: neither t nor any pointer to it may be used again. A view
// gives back only its header, not the storage it shows.
func Free(t *Tensor) {
	if t == nil || t.freed {
		return
	}
	Release(t)
	*t = Tensor{freed: true}
	headers.push(t)
}

// FreeView frees t's header if t is a view (of storage that lives on in
// other views or its owner), and does nothing to an owner.
func FreeView(t *Tensor) {
	if t != nil && t.base != nil {
		Free(t)
	}
}

// Discard frees a temporary and, for a view, the tensor it views: for
// tensors that nothing else refers to (the gradients autograd passes
// between ops).
func Discard(t *Tensor) {
	if t == nil {
		return
	}
	if t.base != nil {
		Free(t.base)
	}
	Free(t)
}

// IsView reports whether t shows the storage of another tensor (Reshape,
// Flat), which owns it.
func (t *Tensor) IsView() bool { return t.base != nil }

// SameStorage reports whether a and b show the same storage (one is the
// other or a view of it, or both are views of one tensor).
func SameStorage(a, b *Tensor) bool {
	return a != nil && b != nil && a.owner() == b.owner()
}

// FromFloat32 returns an F32 tensor holding vals (not copied).
func FromFloat32(vals []float32, shape ...int) *Tensor {
	mustFit(len(vals), shape)
	return header(dtype.F32, bytesOf(vals), shape)
}

// FromFloat64 returns an F64 tensor holding vals (not copied).
func FromFloat64(vals []float64, shape ...int) *Tensor {
	mustFit(len(vals), shape)
	return header(dtype.F64, bytesOf(vals), shape)
}

// FromBytes returns a tensor over raw little-endian storage (not copied), as
// read from a checkpoint.
func FromBytes(dt dtype.DType, data []byte, shape ...int) (*Tensor, error) {
	n := Numel(shape)
	if n < 0 {
		return nil, fmt.Errorf("tensor: negative dimension in shape %v", shape)
	}
	if want := dt.StorageBytes(n); len(data) != want {
		return nil, fmt.Errorf("tensor: %s%v needs %d bytes, got %d", dt, shape, want, len(data))
	}
	// Copy into an aligned allocation: checkpoint buffers need not be aligned.
	t := New(dt, shape...)
	copy(t.data, data)
	return t, nil
}

// Scalar returns a 0-dimensional tensor of dtype dt holding v.
func Scalar(dt dtype.DType, v float64) *Tensor {
	t := New(dt)
	t.Fill(v)
	return t
}

func (t *Tensor) Shape() []int             { return t.shape }
func (t *Tensor) DType() dtype.DType       { return t.dtype }
func (t *Tensor) Len() int                 { return Numel(t.shape) }
func (t *Tensor) Data() []byte             { t.stored("Data"); return t.data }
func (t *Tensor) Dim(i int) int            { return t.shape[axis(i, len(t.shape))] }
func (t *Tensor) String() string           { return fmt.Sprintf("%s%v", t.dtype, t.shape) }
func (t *Tensor) SameShape(u *Tensor) bool { return EqualShape(t.shape, u.shape) }

// Bytes is the size of t's storage; a meta tensor's is what it would hold.
func (t *Tensor) Bytes() int {
	if t.meta {
		return t.dtype.StorageBytes(t.Len())
	}
	return len(t.data)
}

// Item returns the element of a one-element tensor (a loss) as float64.
func (t *Tensor) Item() float64 {
	if t.Len() != 1 {
		panic(fmt.Sprintf("tensor: Item of %v, which has %d elements", t, t.Len()))
	}
	t.stored("Item")
	var v [1]float64
	dtype.DecodeF64(t.dtype, v[:], t.data)
	return v[0]
}

// Float32s returns a copy of the elements as float32.
func (t *Tensor) Float32s() []float32 {
	t.stored("Float32s")
	out := make([]float32, t.Len())
	if t.dtype == dtype.F64 {
		for i, v := range t.f64() {
			out[i] = float32(v)
		}
		return out
	}
	dtype.Decode(t.dtype, out, t.data)
	return out
}

// Float64s returns a copy of the elements as float64.
func (t *Tensor) Float64s() []float64 {
	t.stored("Float64s")
	out := make([]float64, t.Len())
	dtype.DecodeF64(t.dtype, out, t.data)
	return out
}

// Ints returns the elements of an integer tensor.
func (t *Tensor) Ints() []int {
	t.stored("Ints")
	out := make([]int, t.Len())
	switch t.dtype {
	case dtype.I64:
		for i, v := range unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(t.data))), len(out)) {
			out[i] = int(v)
		}
	default:
		for i, v := range t.Float64s() {
			out[i] = int(v)
		}
	}
	return out
}

// Reshape returns a view with a new shape; one dimension may be -1.
func (t *Tensor) Reshape(shape ...int) *Tensor {
	v := header(t.dtype, t.data, shape)
	v.base, v.meta = t.owner(), t.meta
	shape = v.shape
	n, infer := 1, -1
	for i, d := range shape {
		if d == -1 {
			infer = i
			continue
		}
		n *= d
	}
	if infer >= 0 && n > 0 {
		shape[infer] = t.Len() / n
	}
	mustFit(t.Len(), shape)
	return v
}

// To returns t cast to dt, rounding to nearest even (non-saturating). It
// returns t itself when the dtype already matches.
func (t *Tensor) To(dt dtype.DType) *Tensor { return t.cast(dt, false) }

// ToSat is To with saturation: values beyond dt's range become ±max.
func (t *Tensor) ToSat(dt dtype.DType) *Tensor { return t.cast(dt, true) }

func (t *Tensor) cast(dt dtype.DType, sat bool) *Tensor {
	if dt == t.dtype {
		return t
	}
	if t.meta {
		return Meta(dt, t.shape...)
	}
	out := empty(dt, t.shape...)
	switch {
	case t.dtype == dtype.F64:
		convert(dt, t.f64(), out.data, sat, encodeF64)
		return out
	case dt == dtype.F32 && !sat: // widening: decode straight into out
		convert(t.dtype, out.f32(), t.data, false, decodeF32)
		return out
	}
	src := get[float32](t)
	encode(dt, out.data, src, sat)
	drop(t, src)
	return out
}

// Flat returns a 1-D view of n elements of t's storage from start: writes
// through either are seen by both.
func (t *Tensor) Flat(start, n int) *Tensor {
	size := elemSize(t)
	v := header(t.dtype, t.data[start*size:(start+n)*size], []int{n})
	v.base = t.owner()
	return v
}

// SliceRows returns a copy of rows [start, start+n) along the first axis.
func SliceRows(x *Tensor, start, n int) *Tensor {
	x.stored("SliceRows")
	size := x.dtype.StorageBytes(x.Len() / x.shape[0])
	out := New(x.dtype, append([]int{n}, x.shape[1:]...)...)
	copy(out.data, x.data[start*size:(start+n)*size])
	return out
}

// Clone returns a deep copy.
func (t *Tensor) Clone() *Tensor {
	t.stored("Clone")
	out := New(t.dtype, t.shape...)
	copy(out.data, t.data)
	return out
}

// CopyFrom overwrites t's elements with u's, converting dtype.
func (t *Tensor) CopyFrom(u *Tensor) {
	mustSameShape("CopyFrom", t, u)
	t.stored("CopyFrom")
	u.stored("CopyFrom")
	c := u.To(t.dtype)
	copy(t.data, c.data)
	if c != u {
		Free(c)
	}
}

// Fill sets every element to v (rounded to t's dtype).
func (t *Tensor) Fill(v float64) {
	if t.dtype == dtype.F64 {
		for i := range t.f64() {
			t.f64()[i] = v
		}
		return
	}
	vals := buf[float32](t)
	for i := range vals {
		vals[i] = float32(v)
	}
	put(t, vals)
}

// Norm returns the L2 norm of the elements, accumulated in float64.
func (t *Tensor) Norm() float64 {
	var s float64
	if t.dtype == dtype.F64 {
		for _, v := range t.f64() {
			s += v * v
		}
		return math.Sqrt(s)
	}
	vals := get[float32](t) // every narrower float widens to float32 exactly
	for _, v := range vals {
		s += float64(v) * float64(v)
	}
	drop(t, vals)
	return math.Sqrt(s)
}

// HasNonFinite reports whether any element is inf or NaN.
func (t *Tensor) HasNonFinite() bool {
	if t.dtype == dtype.F64 {
		for _, v := range t.f64() {
			if math.IsInf(v, 0) || math.IsNaN(v) {
				return true
			}
		}
		return false
	}
	vals := get[float32](t)
	defer drop(t, vals)
	for _, v := range vals {
		if math.Float32bits(v)&0x7f800000 == 0x7f800000 { // all-ones exponent: inf or NaN
			return true
		}
	}
	return false
}

func (t *Tensor) f32() []float32 {
	if t.meta {
		panic(errMetaKernel)
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(t.data))), len(t.data)/4)
}

func (t *Tensor) f64() []float64 {
	if t.meta {
		panic(errMetaKernel)
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(t.data))), len(t.data)/8)
}

func bytesOf[T float32 | float64](s []T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(T(0))))
}

// Numel is the element count of shape, -1 if a dimension is negative.
func Numel(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		n *= d
	}
	return n
}

func mustFit(n int, shape []int) {
	if Numel(shape) != n {
		panic(fmt.Sprintf("tensor: %d elements do not fit shape %v", n, slices.Clone(shape))) // a clone, so that shape stays on the caller's stack
	}
}

// EqualShape reports whether two shapes are the same.
func EqualShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func mustSameShape(op string, a, b *Tensor) {
	if !EqualShape(a.shape, b.shape) {
		panic(fmt.Sprintf("tensor: %s: shapes %v and %v differ", op, a.shape, b.shape))
	}
}

// axis resolves a possibly negative axis index.
func axis(i, rank int) int {
	if i < 0 {
		return i + rank
	}
	return i
}

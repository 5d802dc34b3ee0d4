package tensor

import (
	"math/bits"
	"sync"
)

// Storage and scratch buffers (decoding low-precision tensors to their
// compute type, encoding results back) are recycled by power-of-two size
// class. A training step needs the same buffers every step, so, as a
// caching allocator does, freed buffers are kept rather than left to the
// garbage collector (which would empty a sync.Pool every cycle): a steady
// state allocates nothing, and memory stays at the step's peak.
var (
	free32 [64]freeList[[]float32]
	free64 [64]freeList[[]float64]
)

// freeList is a stack of free buffers of one size class (or of tensor headers).
type freeList[T any] struct {
	mu   sync.Mutex
	bufs []T
}

func (l *freeList[T]) pop() T {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s T
	if n := len(l.bufs); n > 0 {
		s, l.bufs[n-1] = l.bufs[n-1], s
		l.bufs = l.bufs[:n-1]
	}
	return s
}

func (l *freeList[T]) push(s T) {
	l.mu.Lock()
	l.bufs = append(l.bufs, s)
	l.mu.Unlock()
}

// sizeClass is the class of buffers of capacity 2^class ≥ n.
func sizeClass(n int) int { return bits.Len(uint(n - 1)) }

func freeListOf[T float](class int) *freeList[[]T] {
	if isF64[T]() {
		return any(&free64[class]).(*freeList[[]T])
	}
	return any(&free32[class]).(*freeList[[]T])
}

// scratch returns a []T of length n from the free lists (contents
// undefined: NaN under the weftpoison tag).
func scratch[T float](n int) []T {
	if n == 0 {
		return nil
	}
	c := sizeClass(n)
	s := freeListOf[T](c).pop()
	if s == nil {
		s = make([]T, n, 1<<c)
	}
	if poisonPool {
		poison(s[:cap(s)])
	}
	return s[:n]
}

// release returns a buffer from scratch to the free lists (filled with NaN
// under the weftpoison tag, so that a later read through a stale slice
// shows).
func release[T float](s []T) {
	if cap(s) == 0 || cap(s)&(cap(s)-1) != 0 {
		return // not from scratch
	}
	if poisonPool {
		poison(s[:cap(s)])
	}
	freeListOf[T](sizeClass(cap(s))).push(s[:0])
}

// poison sets every byte of s to 0xff: NaN as float64, float32, bf16, f16,
// e4m3fn and e5m2 alike (and -max in the fnuz formats), whatever dtype
// the bytes are read as.
func poison[T float](s []T) {
	b := bytesOf(s)
	for i := range b {
		b[i] = 0xff
	}
}

// drop releases vals if get decoded it into scratch rather than viewing t.
func drop[T float](t *Tensor, vals []T) {
	if !native[T](t) {
		release(vals)
	}
}

package tensor

import (
	"math/bits"
	"sync"
)

// Scratch buffers for decoding low-precision tensors to their compute type
// and encoding results back are pooled by power-of-two size class: a
// training step decodes every bf16 activation at least once, and fresh
// memory is slow to touch on these machines.
var (
	pool32 [64]sync.Pool
	pool64 [64]sync.Pool
)

// sizeClass is the pool holding buffers of capacity 2^class ≥ n.
func sizeClass(n int) int { return bits.Len(uint(n - 1)) }

// scratch returns a []T of length n from the pool (contents undefined).
func scratch[T float](n int) []T {
	if n == 0 {
		return nil
	}
	c := sizeClass(n)
	p := &pool32[c]
	if isF64[T]() {
		p = &pool64[c]
	}
	if s, ok := p.Get().(*[]T); ok {
		return (*s)[:n]
	}
	return make([]T, n, 1<<c)
}

// release returns a buffer from scratch to the pool.
func release[T float](s []T) {
	if cap(s) == 0 || cap(s)&(cap(s)-1) != 0 {
		return // not from scratch
	}
	p := &pool32[sizeClass(cap(s))]
	if isF64[T]() {
		p = &pool64[sizeClass(cap(s))]
	}
	s = s[:0]
	p.Put(&s)
}

// drop releases vals if get decoded it into scratch rather than viewing t.
func drop[T float](t *Tensor, vals []T) {
	if !native[T](t) {
		release(vals)
	}
}

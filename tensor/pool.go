package tensor

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Storage and scratch buffers (decoding low-precision tensors to their
// compute type, encoding results back) are recycled by size class. A
// training step needs the same buffers every step, so, as a caching
// allocator does, freed buffers are kept rather than left to the garbage
// collector (which would empty a sync.Pool every cycle): a steady state
// allocates nothing, and memory stays at the step's peak.
var (
	free32 [numClasses]freeList[[]float32]
	free64 [numClasses]freeList[[]float64]
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

// Size classes are 1, 2, 3, 4 and then four per power of two, m·2^e
// elements for m in 4..7 (5, 6, 7, 8, 10, 12, 14, 16, 20 ...). Rounding n
// up to its class adds less than 2^e to an n above 4·2^e: under 25% of
// the request, where power-of-two classes waste up to half the buffer.
// The last class, 2^63, is that of every n above 7·2^60.
const numClasses = 3 + 4*61 + 1

// sizeClass is the smallest class holding n ≥ 1 elements.
func sizeClass(n int) int {
	if n <= 4 {
		return n - 1
	}
	e := bits.Len(uint(n-1)) - 3 // n-1 is in [4·2^e, 8·2^e)
	m := (n-1)>>e + 1            // ⌈n/2^e⌉, in 5..8; 8·2^e is class 4·2^(e+1), which the index gives too
	return 3 + 4*e + m - 4
}

// classSize is the capacity, in elements, of the buffers of class c.
func classSize(c int) int {
	if c < 3 {
		return c + 1
	}
	return (4 + (c-3)%4) << ((c - 3) / 4)
}

func freeListOf[T float](class int) *freeList[[]T] {
	if isF64[T]() {
		return any(&free64[class]).(*freeList[[]T])
	}
	return any(&free32[class]).(*freeList[[]T])
}

// The pool's byte counters, which MemStats describes.
var liveBytes, requestedBytes, peakBytes, reservedBytes atomic.Int64

// MemStats is what the tensor pool holds, in bytes, process-wide. Tensor
// storage from New, ops and casts, and kernels' scratch, count; tensors
// over caller memory (FromFloat32, FromFloat64) and views do not. A pool
// tensor dropped without Release or Free stays counted, so a leak shows
// as Live growing step after step.
type MemStats struct {
	// Live is the capacity of the buffers handed out and not yet given
	// back (torch.cuda.memory_allocated): requests rounded up to their
	// size class, or to the 512-byte slab granule for a large one.
	Live int64
	// Requested is what those buffers were asked for, at most Live.
	Requested int64
	// Peak is the largest Live since the process started or ResetPeak
	// (torch.cuda.max_memory_allocated).
	Peak int64
	// Reserved is every byte the pool has allocated, live or idle in its
	// free lists and slabs for reuse (torch.cuda.memory_reserved); only
	// Drop returns memory, of a class buffer or a slab it leaves wholly
	// free.
	Reserved int64
}

// Memory returns the pool's counters. Each is exact, but they are read one
// after another, so while other goroutines allocate they need not describe
// the same instant.
func Memory() MemStats {
	return MemStats{Live: liveBytes.Load(), Requested: requestedBytes.Load(), Peak: peakBytes.Load(), Reserved: reservedBytes.Load()}
}

// ResetPeak starts a new high-water mark from the bytes live now
// (torch.cuda.reset_peak_memory_stats).
func ResetPeak() { peakBytes.Store(liveBytes.Load()) }

// acquired counts a buffer of capacity bytes, asked for as requested bytes,
// as handed out.
func acquired(capacity, requested int64) {
	requestedBytes.Add(requested)
	live := liveBytes.Add(capacity)
	for {
		peak := peakBytes.Load()
		if live <= peak || peakBytes.CompareAndSwap(peak, live) {
			return
		}
	}
}

// held is what scratch hands out, in bytes, for n elements of esize
// bytes: the request rounded up to its class, or to slabAlign from a slab.
func held(n int, esize int64) int64 {
	switch {
	case n == 0:
		return 0
	case int64(n)*esize >= slabMin:
		return (int64(n)*esize + slabAlign - 1) / slabAlign * slabAlign
	}
	return esize * int64(classSize(sizeClass(n)))
}

// scratch returns a []T of length n from the free lists, or from a slab
// for n·size(T) ≥ slabMin (contents undefined: NaN under the weftpoison
// tag).
func scratch[T float](n int) []T {
	if n == 0 {
		return nil
	}
	var s []T
	var z T
	if int64(n)*int64(unsafe.Sizeof(z)) >= slabMin {
		s = slabAlloc[T](n)
	} else {
		c := sizeClass(n)
		s = freeListOf[T](c).pop()
		if s == nil {
			s = make([]T, n, classSize(c))
			reservedBytes.Add(sizeOf(s[:cap(s)]))
		}
	}
	acquired(sizeOf(s[:cap(s)]), sizeOf(s[:n]))
	if poisonPool {
		poison(s[:cap(s)])
	}
	return s[:n]
}

// release returns a buffer from scratch, as scratch returned it, to the
// free lists or its slab (filled with NaN under the weftpoison tag, so
// that a later read through a stale slice shows).
func release[T float](s []T) {
	slabbed, ok := ours(s, false)
	if !ok {
		return
	}
	liveBytes.Add(-sizeOf(s[:cap(s)]))
	requestedBytes.Add(-sizeOf(s))
	if !slabbed {
		if poisonPool {
			poison(s[:cap(s)])
		}
		freeListOf[T](sizeClass(cap(s))).push(s[:0])
	}
}

// forget takes a buffer from scratch out of the pool's account for the
// garbage collector to reclaim: storage no step will ask for again, which
// idle in a free list would only hold memory. A slab block is freed in
// its slab, for other requests, and the slab goes to the collector once
// wholly free.
func forget[T float](s []T) {
	slabbed, ok := ours(s, true)
	if !ok {
		return
	}
	liveBytes.Add(-sizeOf(s[:cap(s)]))
	requestedBytes.Add(-sizeOf(s))
	if !slabbed {
		reservedBytes.Add(-sizeOf(s[:cap(s)]))
	}
}

// ours reports whether s came from scratch, and whether from a slab, in
// which it frees the block (dropping a slab left wholly free, with drop). A block's capacity
// is at least slabMin bytes and a class buffer's at most slabMin, so only
// buffers of exactly slabMin are looked for in both.
func ours[T float](s []T, drop bool) (slabbed, ok bool) {
	if cap(s) == 0 {
		return false, false
	}
	if sizeOf(s[:cap(s)]) >= slabMin && slabFree(s, drop) {
		return true, true
	}
	return false, classed(s)
}

// classed reports whether s has the capacity of a class that scratch
// serves from the free lists.
func classed[T float](s []T) bool {
	return sizeOf(s[:cap(s)]) <= slabMin && classSize(sizeClass(cap(s))) == cap(s)
}

// sizeOf is the size of s's elements in bytes.
func sizeOf[T float](s []T) int64 {
	var z T
	return int64(len(s)) * int64(unsafe.Sizeof(z))
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

package tensor

import (
	"slices"
	"sync"
	"unsafe"
)

// Large buffers come from slabs rather than size classes, as in PyTorch's
// caching allocator: a request takes the best-fitting free block of any
// slab, split to the request, and a released block merges with its free
// neighbours. A training step frees activations (B·T·C floats) while it
// allocates gradients (parameter-shaped): with a free list per class the
// idle activations could not serve the gradients, and the pool reserved
// the gradients' size over the step's peak; carved from slabs, the
// activations' freed memory serves requests of any size.
const (
	// slabMin is the smallest request, in bytes, served from a slab.
	// Smaller buffers are many and short-lived (kernels' scratch, biases,
	// norms' statistics) and keep their lock-per-class free lists.
	slabMin = 256 << 10
	// slabAlign is the granule of blocks, in bytes: every block's size and
	// offset is a multiple, so that float32 and float64 views are aligned
	// alike, and a request wastes under 0.2% of its 256 KiB minimum.
	slabAlign = 512
	// slabSize is the largest size of a slab, in bytes; a larger request
	// gets a slab of its own size. 32 MiB holds dozens of a step's
	// activations (1 MiB each for the 25M-parameter gpt at batch 8), so
	// their frees coalesce into holes that serve the step's gradients,
	// while the idle tail of the last slab, the most this scheme reserves
	// over the peak for layout's sake, stays small beside a model's
	// memory. Slabs grow to it from slabFirst, each as large as all
	// before it together (2, 2, 4, 8, 16, 32, 32 ... MiB), so that a
	// process with a few large buffers does not reserve 32 MiB for them,
	// and a large one reaches full slabs after a handful. A slab is
	// mapped memory (slabMemory) whose untouched pages are not resident,
	// so RSS follows what the steps write, not the slabs' size.
	slabSize  = 32 << 20
	slabFirst = 2 << 20
)

// slab is one large allocation, carved into blocks.
type slab struct {
	mem  []float64 // never resliced: the slab's memory
	base uintptr   // &mem[0], to find a block's slab by address
	// at holds, for each slabAlign granule, the block starting there (nil
	// where none does), so that release finds its block without a map,
	// whose inserts and deletes could allocate in a steady step.
	at []*block
}

func (s *slab) bytes() int64 { return int64(len(s.mem)) * 8 }

// block is a run of a slab, free or handed out; blocks tile their slab
// in address order through prev and next, and no two free ones are
// neighbours.
type block struct {
	slab       *slab
	off, size  int64 // bytes
	free       bool
	prev, next *block
	// dirty is how many of a free block's bytes may still be resident:
	// written while handed out and not purged since.
	dirty int64
}

func (b *block) ptr() unsafe.Pointer { return unsafe.Pointer(&b.slab.mem[b.off/8]) }

// slabs is the slab allocator's state, under one mutex.
var slabs struct {
	mu    sync.Mutex
	all   []*slab  // by base address
	bytes int64    // the size of all
	free  []*block // free blocks by (size, address): best fit is a binary search
	spare []*block // block structs merged away, for reuse: a steady step allocates none
	// live is the bytes handed out, maxLive their most ever, and dirty
	// the free blocks' dirty bytes: the slabs' resident set is at most
	// live + dirty, which trim keeps within maxLive + slack.
	live, maxLive, dirty int64
}

// Free blocks keep their pages resident, so that the next step reuses
// them without page faults, while the slabs' resident set stays within
// slack of the most ever handed out. Past that (the layout of a step's
// buffers has left holes that its requests do not fit, and a new slab was
// carved), trim purges the largest free blocks: fragmentation costs
// address space, not memory. The slack is what the pool may hold over
// its peak for speed: 1/16 of the peak, at least 8 MiB.
func slack() int64 { return max(8<<20, slabs.maxLive/16) }

// trim purges free blocks, largest first, until the slabs' resident set
// is within slack of maxLive. slabs.mu is held.
func trim() {
	limit := slabs.maxLive + slack()
	for i := len(slabs.free) - 1; i >= 0 && slabs.live+slabs.dirty > limit; i-- {
		if b := slabs.free[i]; b.dirty > 0 {
			purge(b.ptr(), b.size)
			slabs.dirty -= b.dirty
			b.dirty = 0
		}
	}
}

// less orders free blocks by size, then address.
func (b *block) less(c *block) bool {
	if b.size != c.size {
		return b.size < c.size
	}
	return b.slab.base+uintptr(b.off) < c.slab.base+uintptr(c.off)
}

func insertFree(b *block) {
	i, _ := slices.BinarySearchFunc(slabs.free, b, cmpBlock)
	slabs.free = slices.Insert(slabs.free, i, b)
}

func removeFree(b *block) {
	i, found := slices.BinarySearchFunc(slabs.free, b, cmpBlock)
	if !found || slabs.free[i] != b {
		panic("tensor: slab free list lost a block")
	}
	slabs.free = slices.Delete(slabs.free, i, i+1)
}

func cmpBlock(a, b *block) int {
	switch {
	case a.less(b):
		return -1
	case b.less(a):
		return 1
	}
	return 0
}

func newBlock() *block {
	if n := len(slabs.spare); n > 0 {
		b := slabs.spare[n-1]
		slabs.spare = slabs.spare[:n-1]
		return b
	}
	return new(block)
}

// retire unlinks b from its slab's index and keeps its struct for reuse.
func retire(b *block) {
	b.slab.at[b.off/slabAlign] = nil
	*b = block{}
	slabs.spare = append(slabs.spare, b)
}

// newSlab allocates a slab of at least size bytes and returns its one
// free block, not in the free list.
func newSlab(size int64) *block {
	size = max(size, min(slabSize, max(slabFirst, slabs.bytes)))
	slabs.bytes += size
	mem := slabMemory(size)
	s := &slab{mem: mem, base: uintptr(unsafe.Pointer(unsafe.SliceData(mem))), at: make([]*block, size/slabAlign)}
	i, _ := slices.BinarySearchFunc(slabs.all, s.base, func(t *slab, p uintptr) int { return cmpAddr(t.base, p) })
	slabs.all = slices.Insert(slabs.all, i, s)
	reservedBytes.Add(size)
	b := newBlock()
	*b = block{slab: s, size: size, free: true}
	s.at[0] = b
	return b
}

func cmpAddr(a, b uintptr) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// slabAlloc hands out a block for n elements of T (n·size(T) ≥ slabMin),
// as a slice of length n whose capacity is the block's, so that no kernel
// sees memory past it.
func slabAlloc[T float](n int) []T {
	var z T
	esize := int64(unsafe.Sizeof(z))
	size := held(n, esize)
	slabs.mu.Lock()
	var b *block
	if i, _ := slices.BinarySearchFunc(slabs.free, size, func(b *block, size int64) int { return cmpAddr(uintptr(b.size), uintptr(size)) }); i < len(slabs.free) {
		b = slabs.free[i]
		slabs.free = slices.Delete(slabs.free, i, i+1)
	} else {
		b = newSlab(size)
	}
	slabs.dirty -= b.dirty
	if b.size > size { // split: the rest stays free
		rest := newBlock()
		*rest = block{slab: b.slab, off: b.off + size, size: b.size - size, free: true, prev: b, next: b.next, dirty: min(b.dirty, b.size-size)}
		slabs.dirty += rest.dirty
		if b.next != nil {
			b.next.prev = rest
		}
		b.next, b.size = rest, size
		b.slab.at[rest.off/slabAlign] = rest
		insertFree(rest)
	}
	b.free, b.dirty = false, 0
	slabs.live += size
	slabs.maxLive = max(slabs.maxLive, slabs.live)
	trim() // a new slab may leave holes resident that no request fit
	p := b.ptr()
	slabs.mu.Unlock()
	return unsafe.Slice((*T)(p), size/esize)[:n]
}

// slabBlock is the handed-out block starting at p, or nil if p starts
// none (a foreign slice, or one into a block's middle). slabs.mu is held.
func slabBlock(p uintptr) *block {
	i, found := slices.BinarySearchFunc(slabs.all, p, func(t *slab, p uintptr) int { return cmpAddr(t.base, p) })
	if !found {
		i-- // the slab below p, if p lies in one
	}
	if i < 0 || i >= len(slabs.all) {
		return nil
	}
	s := slabs.all[i]
	off := p - s.base
	if off >= uintptr(s.bytes()) || off%slabAlign != 0 {
		return nil
	}
	b := s.at[off/slabAlign]
	if b == nil || b.free {
		return nil
	}
	return b
}

// slabFree gives back the block s came from, merging it with its free
// neighbours, and reports whether s was one (a foreign slice is left
// alone). With drop, a slab left wholly free goes to the garbage
// collector: Drop's storage is of a size no step asks for again. Under
// weftpoison the block is poisoned first, before another request can
// take it.
func slabFree[T float](s []T, drop bool) bool {
	slabs.mu.Lock()
	defer slabs.mu.Unlock()
	b := slabBlock(uintptr(unsafe.Pointer(unsafe.SliceData(s))))
	if b == nil || int64(cap(s))*int64(unsafe.Sizeof(s[0])) != b.size {
		return false
	}
	if poisonPool {
		poison(s[:cap(s)])
	}
	b.free, b.dirty = true, b.size
	slabs.live -= b.size
	slabs.dirty += b.size
	if n := b.next; n != nil && n.free {
		removeFree(n)
		absorb(b)
	}
	if p := b.prev; p != nil && p.free {
		removeFree(p)
		absorb(p)
		b = p
	}
	if drop && b.prev == nil && b.next == nil { // the slab leaves the pool: its pages leave the resident set, its mapping stays (see slabMemory)
		purge(b.ptr(), b.size)
		slabs.dirty -= b.dirty
		i := slices.Index(slabs.all, b.slab)
		slabs.all = slices.Delete(slabs.all, i, i+1)
		slabs.bytes -= b.slab.bytes()
		reservedBytes.Add(-b.slab.bytes())
		retire(b)
		return true
	}
	if drop { // Drop's storage is not asked for again: its pages need not stay resident
		purge(b.ptr(), b.size)
		slabs.dirty -= b.dirty
		b.dirty = 0
	}
	insertFree(b)
	trim()
	return true
}

// absorb merges b's next block, free, into b.
func absorb(b *block) {
	n := b.next
	b.size += n.size
	b.dirty += n.dirty
	b.next = n.next
	if n.next != nil {
		n.next.prev = b
	}
	retire(n)
}

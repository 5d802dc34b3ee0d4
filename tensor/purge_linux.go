package tensor

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// pageSize is the granule purge gives back.
var pageSize = uintptr(unix.Getpagesize())

// purge tells the kernel that the whole pages within n bytes at p hold
// nothing worth keeping: they leave the process's resident set now, and
// read as zeros when next touched. The memory stays the slab's.
func purge(p unsafe.Pointer, n int64) {
	skip := (pageSize - uintptr(p)%pageSize) % pageSize
	if uintptr(n) < skip+pageSize {
		return
	}
	pages := (uintptr(n) - skip) &^ (pageSize - 1)
	// An error leaves the pages resident, which costs memory, not
	// correctness.
	_ = unix.Madvise(unsafe.Slice((*byte)(unsafe.Add(p, skip)), pages), unix.MADV_DONTNEED)
}

// slabMemory maps size bytes for a slab outside the Go heap: the garbage
// collector sets its goal from the heap it manages, which with slabs in it
// would be the model's memory, letting a step's small garbage grow to as
// much before a collection; outside it, the goal follows the little the
// rest of the process holds. Slabs hold floats only, never pointers, and
// are never unmapped, so that no stale slice can fault. Where mapping
// fails the slab comes from the heap.
func slabMemory(size int64) []float64 {
	b, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return make([]float64, size/8)
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(b))), size/8)
}

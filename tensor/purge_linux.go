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

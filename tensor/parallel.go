package tensor

import (
	"runtime"
	"sync"
)

// parallelMin is the smallest element count worth splitting across cores.
const parallelMin = 1 << 16

// parallelParts is the number of ranges parallelFor splits n elements
// into. Hot callers run a single range themselves, saving the closure.
func parallelParts(n int) int { return min(runtime.GOMAXPROCS(0), n/parallelMin) }

// parallelFor runs body over [0, n) split into one contiguous range per
// core (n small: on the calling goroutine). Elementwise kernels give the
// same results however the range is split.
func parallelFor(n int, body func(lo, hi int)) {
	if parts := parallelParts(n); parts > 1 {
		parallelSplit(n, parts, body)
		return
	}
	body(0, n)
}

// parallelSplit runs body over [0, n) in parts contiguous ranges, one per
// goroutine, the first on the calling one.
func parallelSplit(n, parts int, body func(lo, hi int)) {
	var wg sync.WaitGroup
	per := (n + parts - 1) / parts
	for lo := per; lo < n; lo += per {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body(lo, min(lo+per, n))
		}()
	}
	body(0, min(per, n))
	wg.Wait()
}

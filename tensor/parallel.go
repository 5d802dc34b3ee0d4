package tensor

import (
	"runtime"
	"sync"

	"github.com/weftml/weft/internal/par"
)

// parallelMin is the smallest element count worth splitting across cores.
//
// Every op over activations splits this way once its tensor holds
// parallelMin elements per core (smaller ones, as in the reference
// models, run on the calling goroutine and build no closure): rowwise
// ops (softmax, LayerNorm, cross-entropy) by ranges of rows, elementwise
// ops and casts by ranges of elements, Permute by ranges of its copied
// runs. A reduction over rows (LayerNorm's dw and db, ReduceBroadcast's
// bias gradients) splits by ranges of its outputs instead, each summed
// over the rows in the order a single core sums them, and cross-entropy
// sums its rows' losses on the caller: results are the same bits on any
// number of cores (TestParallelOpsIgnoreGOMAXPROCS).
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

// parallelSplit runs body over [0, n) in parts contiguous ranges: the
// first on the calling goroutine, the others on the helpers the GEMM uses
// too (internal/par).
func parallelSplit(n, parts int, body func(lo, hi int)) {
	s := splits.Get().(*split)
	per := (n + parts - 1) / parts
	for lo := per; lo < n; lo += per {
		s.ranges = append(s.ranges, rangeJob{body: body, lo: lo, hi: min(lo+per, n), done: &s.done})
	}
	s.done.Add(len(s.ranges))
	jobs := par.Hire(len(s.ranges))
	for i := range s.ranges {
		jobs <- &s.ranges[i]
	}
	body(0, min(per, n))
	par.Drain(jobs)
	s.done.Wait()
	clear(s.ranges) // do not keep the caller's closure alive in the pool
	s.ranges = s.ranges[:0]
	splits.Put(s)
}

// split holds the ranges of one parallelSplit, recycled through splits so
// that the helpers get pointers and no range is boxed on the heap.
type split struct {
	ranges []rangeJob
	done   sync.WaitGroup
}

var splits = sync.Pool{New: func() any { return new(split) }}

// rangeJob is one range of a parallelSplit.
type rangeJob struct {
	body   func(lo, hi int)
	lo, hi int
	done   *sync.WaitGroup
}

func (j *rangeJob) Do() {
	j.body(j.lo, j.hi)
	j.done.Done()
}

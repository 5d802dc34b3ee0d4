package tensor

import (
	"runtime"
	"sync"
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
// first on the calling goroutine, the others on helpers.
func parallelSplit(n, parts int, body func(lo, hi int)) {
	jobs := hire(parts - 1)
	done := waitGroups.Get().(*sync.WaitGroup)
	per := (n + parts - 1) / parts
	for lo := per; lo < n; lo += per {
		done.Add(1)
		jobs <- rangeJob{body: body, lo: lo, hi: min(lo+per, n), done: done}
	}
	body(0, min(per, n))
	// Run the ranges no helper has taken yet rather than wait for one to
	// wake (they may be another call's: each signals its own caller).
	for drained := false; !drained; {
		select {
		case j := <-jobs:
			j.run()
		default:
			drained = true
		}
	}
	done.Wait()
	waitGroups.Put(done)
}

// rangeJob is one range of a parallelSplit, sent to helpers by value.
type rangeJob struct {
	body   func(lo, hi int)
	lo, hi int
	done   *sync.WaitGroup
}

func (j rangeJob) run() {
	j.body(j.lo, j.hi)
	j.done.Done()
}

// helpers run the ranges of parallel splits. They start when first needed
// and then wait on jobs for good, so that a split starts no goroutines
// and allocates nothing but its caller's closure.
var helpers struct {
	sync.Mutex
	n    int
	jobs chan rangeJob
}

var waitGroups = sync.Pool{New: func() any { return new(sync.WaitGroup) }}

// hire returns the job queue once at least n helpers exist.
func hire(n int) chan rangeJob {
	helpers.Lock()
	defer helpers.Unlock()
	if helpers.jobs == nil {
		// Room for the ranges of several calls; when it is full, callers
		// wait for helpers, which always make progress.
		helpers.jobs = make(chan rangeJob, 64)
	}
	for ; helpers.n < n; helpers.n++ {
		go func(jobs chan rangeJob) {
			for j := range jobs {
				j.run()
			}
		}(helpers.jobs)
	}
	return helpers.jobs
}

// Package par is the one set of helper goroutines that every kernel split
// across cores runs its parts on: the GEMM's row or column blocks and the
// tensor package's ranges of rows and elements alike.
//
// One set, not one per package: a helper polls for its next job for a
// while after each one (see linger), and a helper of another pool that is
// polling holds the second core without taking the job waiting for it, so
// an op right after a product would run both its halves on the caller.
package par

import (
	"runtime"
	"sync"
	"time"
)

// A Job is one part of a split call, run by a helper or by the caller.
type Job interface{ Do() }

// helpers run the parts of split calls that the calling goroutine does
// not. They are started when first needed and then wait on jobs for good,
// so that a split call neither spawns goroutines nor allocates.
var helpers struct {
	sync.Mutex
	n    int
	jobs chan Job
}

// Hire returns the job queue once at least n helpers exist.
func Hire(n int) chan Job {
	helpers.Lock()
	defer helpers.Unlock()
	if helpers.jobs == nil {
		// Room for the parts of several calls; when it is full, callers
		// wait for helpers, which always make progress.
		helpers.jobs = make(chan Job, 64)
	}
	for ; helpers.n < n; helpers.n++ {
		go help(helpers.jobs)
	}
	return helpers.jobs
}

// Drain runs the jobs no helper has taken yet on the caller rather than
// wait for one to wake (they may be another call's: each signals its own
// caller).
func Drain(jobs chan Job) {
	for {
		select {
		case j := <-jobs:
			j.Do()
		default:
			return
		}
	}
}

// linger is how long a helper polls for the next job before it blocks. A
// blocked helper's thread sleeps, and on a virtual machine its idle CPU may
// take a hundred microseconds to wake; kernels come in bursts (a training
// step is a sequence of them), and polling keeps the CPU awake between them.
const linger = 200 * time.Microsecond

// help runs jobs for good.
func help(jobs chan Job) {
	for {
		j, ok := poll(jobs)
		if !ok {
			j = <-jobs
		}
		j.Do()
	}
}

// poll returns the next job if one comes within linger, yielding to other
// goroutines while it waits.
func poll(jobs chan Job) (Job, bool) {
	for start := time.Now(); time.Since(start) < linger; runtime.Gosched() {
		select {
		case j := <-jobs:
			return j, true
		default:
		}
	}
	return nil, false
}

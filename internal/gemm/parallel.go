package gemm

import (
	"runtime"
	"sync"
	"time"
)

// A job is a part of a parallel call.
type job interface{ do() }

// helpers run the parts of parallel calls that the calling goroutine does
// not. They are started when first needed and then wait on jobs for good,
// so that a parallel call neither spawns goroutines nor allocates.
var helpers struct {
	sync.Mutex
	n    int
	jobs chan job
}

// hire returns the job queue once at least n helpers exist.
func hire(n int) chan job {
	helpers.Lock()
	defer helpers.Unlock()
	if helpers.jobs == nil {
		// Room for the parts of several calls; when it is full, callers
		// wait for helpers, which always make progress.
		helpers.jobs = make(chan job, 64)
	}
	for ; helpers.n < n; helpers.n++ {
		go help(helpers.jobs)
	}
	return helpers.jobs
}

// linger is how long a helper polls for the next job before it blocks. A
// blocked helper's thread sleeps, and on a virtual machine its idle CPU may
// take a hundred microseconds to wake; products come in bursts (a training
// step is a sequence of them), and polling keeps the CPU awake between them.
const linger = 200 * time.Microsecond

// help runs jobs for good.
func help(jobs chan job) {
	for {
		j, ok := poll(jobs)
		if !ok {
			j = <-jobs
		}
		j.do()
	}
}

// poll returns the next job if one comes within linger, yielding to other
// goroutines while it waits.
func poll(jobs chan job) (job, bool) {
	for start := time.Now(); time.Since(start) < linger; runtime.Gosched() {
		select {
		case j := <-jobs:
			return j, true
		default:
		}
	}
	return nil, false
}

// part is one goroutine's share of a parallel call: a block of whole rows
// or whole columns of C, computed exactly as the serial call would.
type part[T float] struct {
	gemm[T]
	ar *arith[T]
	wg *sync.WaitGroup
}

func (p *part[T]) do() {
	p.serial(p.ar)
	p.wg.Done()
}

// fork holds the parts of one parallel call; it is recycled through
// arith.forks.
type fork[T float] struct {
	parts []part[T]
	wg    sync.WaitGroup
}

// parallel computes g in one part per goroutine, cut at tile boundaries
// along the longer side of C, as each part packs all of the other operand.
// It runs the first part itself and queues the rest for helpers.
func (ar *arith[T]) parallel(g *gemm[T]) {
	byRows := g.m >= g.n
	dim, tile := g.n, g.kern.nr
	if byRows {
		dim, tile = g.m, g.kern.mr
	}
	units := (dim + tile - 1) / tile
	n := min(runtime.GOMAXPROCS(0), units)
	if n == 1 {
		g.serial(ar)
		return
	}
	s, _ := ar.forks.Get().(*fork[T])
	if s == nil {
		s = new(fork[T])
	}
	if cap(s.parts) < n {
		s.parts = make([]part[T], n)
	}
	s.parts = s.parts[:n]
	for i := range s.parts {
		lo, hi := i*units/n*tile, min((i+1)*units/n*tile, dim)
		p := &s.parts[i]
		*p = part[T]{gemm: *g, ar: ar, wg: &s.wg}
		if byRows {
			p.m, p.a, p.c = hi-lo, g.a.from(lo), g.c[lo*g.ldc:]
		} else {
			p.n, p.bt, p.c = hi-lo, g.bt.from(lo), g.c[lo:]
		}
	}
	s.wg.Add(n - 1)
	jobs := hire(n - 1)
	for i := 1; i < n; i++ {
		jobs <- &s.parts[i]
	}
	s.parts[0].serial(ar)
	// Run the parts no helper has taken yet rather than wait for one to wake.
	for drained := false; !drained; {
		select {
		case j := <-jobs:
			j.do()
		default:
			drained = true
		}
	}
	s.wg.Wait()
	clear(s.parts) // do not keep the caller's matrices alive in the pool
	ar.forks.Put(s)
}

package gemm

import (
	"runtime"
	"sync"
)

// split returns how many parts to cut g into, one per goroutine, and whether
// to cut its rows (else its columns). The longer side is cut, as each part
// packs all of the other operand.
func (g *gemm[T]) split() (parts int, byRows bool) {
	procs := runtime.GOMAXPROCS(0)
	if g.m >= g.n {
		return min(procs, (g.m+mr-1)/mr), true
	}
	return min(procs, (g.n+nr-1)/nr), false
}

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
		helpers.jobs = make(chan job, 64)
	}
	for ; helpers.n < n; helpers.n++ {
		go func(jobs chan job) {
			for j := range jobs {
				j.do()
			}
		}(helpers.jobs)
	}
	return helpers.jobs
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

// parallel computes g in parts cut along its rows or columns at tile
// boundaries, running the first itself and queuing the rest for helpers.
func (ar *arith[T]) parallel(g *gemm[T]) {
	n, byRows := g.split()
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
	dim, tile := g.n, nr
	if byRows {
		dim, tile = g.m, mr
	}
	units := (dim + tile - 1) / tile
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

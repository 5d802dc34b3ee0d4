package gemm

import (
	"runtime"
	"sync"

	"github.com/weftml/weft/internal/par"
)

// part is one goroutine's share of a parallel call: a block of whole rows
// or whole columns of C, computed exactly as the serial call would.
type part[T float] struct {
	gemm[T]
	ar *arith[T]
	wg *sync.WaitGroup
}

func (p *part[T]) Do() {
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
			p.m, p.a, p.c, p.ep = hi-lo, g.a.from(lo), g.c[lo*g.ldc:], g.ep.from(lo, 0)
		} else {
			p.n, p.bt, p.c, p.ep = hi-lo, g.bt.from(lo), g.c[lo:], g.ep.from(0, lo)
		}
	}
	s.wg.Add(n - 1)
	jobs := par.Hire(n - 1)
	for i := 1; i < n; i++ {
		jobs <- &s.parts[i]
	}
	s.parts[0].serial(ar)
	par.Drain(jobs)
	s.wg.Wait()
	clear(s.parts) // do not keep the caller's matrices alive in the pool
	ar.forks.Put(s)
}

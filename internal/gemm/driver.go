package gemm

import (
	"sync"

	"github.com/weftml/weft/dtype"
)

// Block sizes, in elements. A kc×nr panel of B (2 KiB of float32) stays in
// the 48 KiB L1 while the kernel sweeps the mc×kc block of A (256 KiB) from
// the 1 MiB L2; the kc×nc block of B (2 MiB) is shared through L3. They are
// fixed, not derived from the machine or the split between goroutines,
// because the k steps decide the order of accumulation.
const (
	kcMax = 256
	mcMax = 256
	ncMax = 2048
)

type float interface{ ~float32 | ~float64 }

// arith holds what differs between the float32 and float64 instantiations.
type arith[T float] struct {
	kernel     func(kc int, a, b, c []T, ldc int)
	workspaces sync.Pool // *workspace[T]
	forks      sync.Pool // *fork[T]
}

var (
	single = arith[float32]{kernel: kernel32}
	double = arith[float64]{kernel: kernel64}
)

// workspace holds one goroutine's packing buffers. It is grown on demand and
// recycled through arith.workspaces, so steady-state calls allocate nothing.
type workspace[T float] struct {
	a, b []T        // packed blocks of op(A) and op(B)
	dec  []T        // decoded stored row, for encoded operands
	tile [mr * nr]T // C tile at the ragged right and bottom edges
}

// workspace returns a workspace with buffers large enough for g.
func (ar *arith[T]) workspace(g *gemm[T]) *workspace[T] {
	ws, _ := ar.workspaces.Get().(*workspace[T])
	if ws == nil {
		ws = new(workspace[T])
	}
	kc, mc, nc := min(g.k, kcMax), min(g.m, mcMax), min(g.n, ncMax)
	ws.a = grow(ws.a, roundUp(mc, mr)*kc)
	ws.b = grow(ws.b, roundUp(nc, nr)*kc)
	if g.a.enc != nil || g.bt.enc != nil {
		ws.dec = grow(ws.dec, max(kc, mc, nc)+1) // +1: an E2M1 row may start at a high nibble
	}
	return ws
}

func grow[T float](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// operand is op(X) as the packing routines see it. Element (r, p) of op(X)
// is element (r, p) of the stored row-major matrix, or (p, r) if trans; the
// stored matrix starts off elements into f, or into enc for encoded data.
type operand[T float] struct {
	f     []T    // stored elements, or nil if enc holds them
	enc   []byte // stored elements in format dt; only when T is float32
	dt    dtype.DType
	off   int
	ld    int
	trans bool
	scale T // multiplies every element as it is packed
}

// transpose returns the operand for op(X)ᵀ.
func (x operand[T]) transpose() operand[T] {
	x.trans = !x.trans
	return x
}

// strides returns the distance in f between consecutive rows of op(X) and
// between consecutive columns.
func (x *operand[T]) strides() (rs, cs int) {
	if x.trans {
		return 1, x.ld
	}
	return x.ld, 1
}

// from returns the operand for the rows of op(X) from r on.
func (x operand[T]) from(r int) operand[T] {
	rs, _ := x.strides()
	x.off += r * rs
	return x
}

// inPlace reports whether the kernel can read op(X) where it is stored.
func (x *operand[T]) inPlace() bool { return x.enc == nil && x.scale == 1 }

// row returns n elements of stored row i from column j on.
func (x *operand[T]) row(i, j, n int, dec []T) []T {
	e := x.off + i*x.ld + j
	if x.enc != nil {
		return x.decode(e, n, dec)
	}
	return x.f[e : e+n]
}

// decode returns n encoded elements from element e on, decoded into dec.
func (x *operand[T]) decode(e, n int, dec []T) []T {
	lead := 0
	if x.dt == dtype.E2M1 {
		lead = e & 1 // two codes per byte: decode from the byte's low nibble
	}
	e -= lead
	dec = dec[:lead+n]
	dtype.Decode(x.dt, any(dec).([]float32), x.enc[x.dt.StorageBytes(e):])
	return dec[lead:]
}

// pack stores the rows×kc block of op(X) at (r0, p0) in dst as panels of w
// rows. A panel holds its w values of each k step together, in the order the
// micro-kernel reads them; the last panel is padded with zero rows.
func (x *operand[T]) pack(dst []T, r0, rows, p0, kc, w int, dec []T) {
	s := x.scale
	if !x.trans { // op(X) rows are stored rows: contiguous along k
		for r := range rows {
			d := dst[r/w*w*kc+r%w:]
			for p, v := range x.row(r0+r, p0, kc, dec) {
				d[p*w] = v * s
			}
		}
	} else { // stored rows are op(X) columns: one k step at a time
		for p := range kc {
			d, i := p*w, 0
			for _, v := range x.row(p0+p, r0, rows, dec) {
				dst[d+i] = v * s
				if i++; i == w {
					d, i = d+w*kc, 0
				}
			}
		}
	}
	if h := rows % w; h != 0 {
		last := dst[(rows-h)*kc:][:w*kc]
		for p := range kc {
			clear(last[p*w+h : p*w+w])
		}
	}
}

// gemm is one call, or one goroutine's part of it: C = op(A)·op(B) + beta·C
// with op(A) m×k and op(B) k×n. B is held as op(B)ᵀ so that both operands
// pack along their rows.
type gemm[T float] struct {
	m, n, k int
	a, bt   operand[T]
	beta    T
	c       []T
	ldc     int
}

// smallMax is the largest m·n·k computed on the calling goroutine alone and,
// when the kernel can read the operands in place, without packing: for
// smaller products, packing and handing parts to other goroutines cost more
// than they save.
const smallMax = 1 << 17

// run computes g: small products directly, large ones packed and split
// between goroutines.
func (g *gemm[T]) run(ar *arith[T]) {
	small := g.m*g.n*g.k <= smallMax
	switch {
	case g.m == 0 || g.n == 0:
	case g.k == 0:
		g.scaleC()
	case small && g.k <= kcMax && g.a.inPlace() && g.bt.inPlace():
		g.direct()
	case small:
		g.serial(ar)
	default:
		ar.parallel(g)
	}
}

// direct computes g without packing: the kernel reads full tiles of op(A)
// and op(B) where they are stored, and the ragged edges are plain dot
// products. Every sum runs in the same order as in serial, since k fits in
// one k step, so the result is the same.
func (g *gemm[T]) direct() {
	g.scaleC()
	rsa, csa := g.a.strides()
	csb, rsb := g.bt.strides() // rows of op(B)ᵀ are columns of op(B)
	a, b, c, ldc := g.a.f[g.a.off:], g.bt.f[g.bt.off:], g.c, g.ldc
	mf, nf := g.m-g.m%mr, g.n-g.n%nr
	for i := 0; i < mf; i += mr {
		for j := 0; j < nf; j += nr {
			kernelGo(g.k, a[i*rsa:], rsa, csa, b[j*csb:], rsb, csb, c[i*ldc+j:], ldc)
		}
	}
	for i := range g.m {
		j := nf
		if i >= mf {
			j = 0
		}
		for ; j < g.n; j++ {
			var s T
			for p := range g.k {
				s += a[i*rsa+p*csa] * b[p*rsb+j*csb]
			}
			c[i*ldc+j] += s
		}
	}
}

// serial computes g on the calling goroutine, for k > 0.
func (g *gemm[T]) serial(ar *arith[T]) {
	g.scaleC()
	ws := ar.workspace(g)
	for jc := 0; jc < g.n; jc += ncMax {
		nc := min(ncMax, g.n-jc)
		for pc := 0; pc < g.k; pc += kcMax {
			kc := min(kcMax, g.k-pc)
			g.bt.pack(ws.b, jc, nc, pc, kc, nr, ws.dec)
			for ic := 0; ic < g.m; ic += mcMax {
				mc := min(mcMax, g.m-ic)
				g.a.pack(ws.a, ic, mc, pc, kc, mr, ws.dec)
				g.block(ar.kernel, ws, mc, nc, kc, g.c[ic*g.ldc+jc:])
			}
		}
	}
	ar.workspaces.Put(ws)
}

// scaleC sets C to beta·C; when beta is 0 it writes zeros without reading C.
func (g *gemm[T]) scaleC() {
	if g.beta == 1 {
		return
	}
	for i := range g.m {
		row := g.c[i*g.ldc:][:g.n]
		if g.beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= g.beta
		}
	}
}

// block adds the product of the packed mc×kc block of A and kc×nc block of
// B to c. The kernel writes full tiles in place and ragged ones into
// ws.tile, which is then added to the part of c that exists.
func (g *gemm[T]) block(kernel func(int, []T, []T, []T, int), ws *workspace[T], mc, nc, kc int, c []T) {
	ldc := g.ldc
	for jr := 0; jr < nc; jr += nr {
		b := ws.b[jr*kc : (jr+nr)*kc]
		w := min(nr, nc-jr)
		for ir := 0; ir < mc; ir += mr {
			a := ws.a[ir*kc : (ir+mr)*kc]
			h := min(mr, mc-ir)
			ct := c[ir*ldc+jr:]
			if h == mr && w == nr {
				kernel(kc, a, b, ct, ldc)
				continue
			}
			t := ws.tile[:]
			clear(t)
			kernel(kc, a, b, t, nr)
			for i := range h {
				for j := range w {
					ct[i*ldc+j] += t[i*nr+j]
				}
			}
		}
	}
}

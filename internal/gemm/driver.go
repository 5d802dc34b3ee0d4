package gemm

import "sync"

// Block sizes: k steps of kcMax elements, or kcMax pairs of bfloat16 for
// two bfloat16 operands, mcMax rows of A and ncMax columns of B. The kernel keeps an
// mr×kc panel of A in L1 while it pairs it with every panel of the kc×nc
// block of B, which streams from L2 and L3, and the mc×kc block of A stays
// in L2. kcMax is fixed, not derived from the machine or the split between
// goroutines, because the k steps decide the order of accumulation; mcMax is
// a multiple of every mr and ncMax of every nr.
const (
	kcMax = 256
	mcMax = 240
	ncMax = 2048
)

type float interface{ ~float32 | ~float64 }

// arith holds what differs between the float32 and float64 instantiations.
type arith[T float] struct {
	kern       kernel[T] // the kernels and packing routines in use (see use)
	bf16       kernel[T] // for float32: multiplies packed pairs of bfloat16
	widen      kernel[T] // for float32: multiplies pairs of bfloat16 widened
	pack       packer
	workspaces sync.Pool // *workspace[T]
	forks      sync.Pool // *fork[T]
}

var (
	single arith[float32]
	double arith[float64]
)

// workspace holds one goroutine's packing buffers. It is grown on demand and
// recycled through arith.workspaces, so steady-state calls allocate nothing.
type workspace[T float] struct {
	a, b  []T // packed blocks of op(A) and op(B)
	dec   []T // decoded stored rows, for encoded operands
	pairs []T // one panel of pairs of bfloat16, for the widen path
}

// workspace returns a workspace with buffers large enough for g.
func (ar *arith[T]) workspace(g *gemm[T]) *workspace[T] {
	ws, _ := ar.workspaces.Get().(*workspace[T])
	if ws == nil {
		ws = new(workspace[T])
	}
	kc, mc, nc := g.words(min(g.k, g.kstep())), min(g.m, mcMax), min(g.n, ncMax)
	mr, nr := g.kern.mr, g.kern.nr
	ws.a = grow(ws.a, roundUp(mc, mr)*kc)
	ws.b = grow(ws.b, roundUp(nc, nr)*kc)
	if !g.a.inPlace() || !g.bt.inPlace() {
		ws.dec = grow(ws.dec, max(8*(kc+2), mc+2, nc+2)) // see operand.decode
	}
	if g.pairs == widenPairs {
		ws.pairs = grow(ws.pairs, max(mr, nr)*kc/2)
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

// gemm is one call, or one goroutine's part of it: C = op(A)·op(B) + beta·C
// with op(A) m×k and op(B) k×n. B is held as op(B)ᵀ so that both operands
// pack along their rows.
type gemm[T float] struct {
	m, n, k int
	a, bt   operand[T]
	beta    T
	c       []T
	ldc     int
	kern    kernel[T] // the kernel in use when the call began
	pairs   pairing   // how kern multiplies two bfloat16 operands, if it does
	pk      *packer   // the packer in use when the call began
	ep      epilogue[T]
}

// A pairing says how a kernel multiplies two bfloat16 operands: as pairs
// of k steps, so that both paths accumulate in VDPBF16PS's order.
type pairing uint8

const (
	noPairs    pairing = iota // not bfloat16: one k step at a time
	dotPairs                  // impl.bf16, with pairs packed in float32 words
	widenPairs                // impl.widen, with pairs widened to two k steps
)

// kstep returns the elements of k in one k step, which the paths for two
// bfloat16 operands share so that their sums are the same.
func (g *gemm[T]) kstep() int {
	if g.pairs != noPairs {
		return 2 * kcMax
	}
	return kcMax
}

// words returns the packed values that hold kc elements of k: an odd kc
// is padded with a zero to whole pairs.
func (g *gemm[T]) words(kc int) int {
	switch g.pairs {
	case dotPairs:
		return (kc + 1) / 2
	case widenPairs:
		return (kc + 1) &^ 1
	}
	return kc
}

// smallMax is the largest m·n·k computed on the calling goroutine alone and,
// when the kernel can read the operands in place, without packing: for
// smaller products, packing and handing parts to other goroutines cost more
// than they save (on a busy two-core machine, 64³ ran faster unpacked on one
// core than packed and split in two, and the reference gpt's 128×128×32
// layers stepped 12% faster unsplit).
const smallMax = 1 << 21

// run computes g: small products directly, large ones packed and split
// between goroutines.
func (g *gemm[T]) run(ar *arith[T]) {
	small := g.m*g.n*g.k <= smallMax
	switch {
	case g.m == 0 || g.n == 0:
	case g.k == 0:
		g.scaleC()
		g.ep.apply(g.c, g.ldc, 0, 0, g.m, g.n)
	case small && g.k <= kcMax && g.kern.strided != nil && g.a.inPlace() && g.bt.inPlace():
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
// one k step, so the result is the same. With beta 0 the sums are stored.
func (g *gemm[T]) direct() {
	add := g.beta != 0
	if add {
		g.scaleC()
	}
	rsa, csa := g.a.strides()
	csb, rsb := g.bt.strides() // rows of op(B)ᵀ are columns of op(B)
	a, b, c, ldc := g.a.f[g.a.off:], g.bt.f[g.bt.off:], g.c, g.ldc
	mr, nr := g.kern.mr, g.kern.nr
	mf, nf := g.m-g.m%mr, g.n-g.n%nr
	for i := 0; i < mf; i += mr {
		for j := 0; j < nf; j += nr {
			g.kern.strided(g.k, a[i*rsa:], rsa, csa, b[j*csb:], rsb, csb, c[i*ldc+j:], ldc, add)
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
			if add {
				s += c[i*ldc+j]
			}
			c[i*ldc+j] = s
		}
	}
	g.ep.apply(c, ldc, 0, 0, g.m, g.n)
}

// serial computes g on the calling goroutine, for k > 0.
func (g *gemm[T]) serial(ar *arith[T]) {
	if g.beta != 0 {
		g.scaleC() // with beta 0, the first k step stores its sums instead
	}
	ws := ar.workspace(g)
	mr, nr := g.kern.mr, g.kern.nr
	for jc := 0; jc < g.n; jc += ncMax {
		nc := min(ncMax, g.n-jc)
		for pc := 0; pc < g.k; pc += g.kstep() {
			kc := min(g.kstep(), g.k-pc)
			g.pack(&g.bt, ws.b, jc, nc, pc, kc, nr, ws)
			for ic := 0; ic < g.m; ic += mcMax {
				mc := min(mcMax, g.m-ic)
				g.pack(&g.a, ws.a, ic, mc, pc, kc, mr, ws)
				g.block(ws, ic, jc, mc, nc, g.words(kc), pc == 0, pc+kc == g.k)
			}
		}
	}
	ar.workspaces.Put(ws)
}

// pack packs x as the kernel in use reads it.
func (g *gemm[T]) pack(x *operand[T], dst []T, r0, rows, p0, kc, w int, ws *workspace[T]) {
	switch g.pairs {
	case dotPairs:
		x.packBF16(dst, r0, rows, p0, kc, w, ws.dec, g.pk)
	case widenPairs:
		x.packWiden(dst, r0, rows, p0, kc, w, ws.dec, ws.pairs, g.pk)
	default:
		x.pack(dst, r0, rows, p0, kc, w, ws.dec, g.pk)
	}
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
// B to the block of C at row ic and column jc, one panel of A at a time so
// that it stays in L1; in the first k step with beta 0 it stores the
// product instead, as C holds nothing yet. In the last k step it runs the
// epilogue on the panel's rows of C, while they are in cache.
func (g *gemm[T]) block(ws *workspace[T], ic, jc, mc, nc, kc int, first, last bool) {
	ldc, kern := g.ldc, g.kern.fn
	mr, nr := g.kern.mr, g.kern.nr
	add := !first || g.beta != 0
	for ir := 0; ir < mc; ir += mr {
		a := ws.a[ir*kc : (ir+mr)*kc]
		h := min(mr, mc-ir)
		c := g.c[(ic+ir)*ldc+jc:]
		for jr := 0; jr < nc; jr += nr {
			kern(kc, a, ws.b[jr*kc:(jr+nr)*kc], c[jr:], ldc, h, min(nr, nc-jr), add)
		}
		if last {
			g.ep.apply(c, ldc, ic+ir, jc, h, nc)
		}
	}
}

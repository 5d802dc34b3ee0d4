package tensor

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/gemm"
)

// attnTile is the number of queries and of keys in one tile: a 64×64
// score tile (16 KiB in float32) and its operands stay in L2 while a
// query tile runs over its key tiles.
const attnTile = 64

// CausalAttention is multi-head causal self-attention over qkv [B, T, 3C],
// q, k and v side by side as a Linear computes them, heads of hs = C/heads
// columns each. For every batch b and head h it returns, in y [B, T, C]
// (heads side by side, as the op-by-op path's permute and reshape leave
// them), what this reference loop computes with s = 1/√hs:
//
//	S = round(round(Q·Kᵀ)·s)        // [T, T], rounded to qkv's dtype
//	S[i][j] = -inf for j > i        // masked_fill
//	P = round_probs(softmax(S))     // softmax in the compute type
//	y = round(round(P)·V)
//
// without materialising S or P: each tile of attnTile queries runs over
// the key tiles up to its diagonal (the fully masked ones are skipped),
// with an online softmax (running maximum and sum). When qkv or probs is
// narrower than float32, P is rounded as the op-by-op path rounds it,
// normalised, so those tiles take a second pass over the keys with the
// row's final log-sum-exp. It also returns that log-sum-exp, lse
// [B, heads, T] in the compute type, which is all the backward pass needs
// besides qkv and y.
//
// The compute type is float64 for F64 qkv and float32 otherwise; probs
// must be qkv's dtype or the compute type (F32 under autocast).
// (b, h, query tile) units are split between cores; each is computed the
// same way however they are split.
func CausalAttention(qkv *Tensor, heads int, probs dtype.DType) (y, lse *Tensor) {
	a := newAttention(qkv, heads, probs)
	if qkv.meta {
		return Meta(qkv.dtype, a.batch, a.seq, a.width), Meta(statsDType(qkv.dtype), a.batch, heads, a.seq)
	}
	y = empty(qkv.dtype, a.batch, a.seq, a.width)
	lse = empty(statsDType(qkv.dtype), a.batch, heads, a.seq)
	if qkv.dtype == dtype.F64 {
		attentionForward[float64](a, qkv, y, lse)
	} else {
		attentionForward[float32](a, qkv, y, lse)
	}
	return y, lse
}

// CausalAttentionBackward returns the gradient with respect to qkv of
// CausalAttention's y, given its inputs, results and dy (y's gradient), in
// FlashAttention-2's way: P is recomputed tile by tile from q, k and lse,
// and the gradients are rounded where the op-by-op path's backward rounds
// them (dP = dy·Vᵀ and the scores' gradient to qkv's dtype, the softmax's
// gradient to probs). The softmax backward's row sums Σ dP∘P are
// rowsum(dy∘y) when nothing is rounded; otherwise they take a first pass
// over the key tiles, so that they sum the rounded dP as the op-by-op path
// does. (b, h) units are split between cores.
func CausalAttentionBackward(qkv, y, lse, dy *Tensor, heads int, probs dtype.DType) *Tensor {
	a := newAttention(qkv, heads, probs)
	if !EqualShape(y.shape, []int{a.batch, a.seq, a.width}) || !y.SameShape(dy) {
		panic(fmt.Sprintf("tensor: attention backward of %v with y %v and dy %v", qkv, y, dy))
	}
	if anyMeta(qkv, dy) {
		return Meta(qkv.dtype, qkv.shape...)
	}
	dqkv := empty(qkv.dtype, qkv.shape...) // every element is written
	if qkv.dtype == dtype.F64 {
		attentionBackward[float64](a, qkv, y, lse, dy, dqkv)
	} else {
		attentionBackward[float32](a, qkv, y, lse, dy, dqkv)
	}
	return dqkv
}

// attention is the geometry and rounding of one call.
type attention struct {
	batch, seq, width, heads, hs int
	dt, probs                    dtype.DType
	// exact marks a call in which nothing is rounded below the compute
	// type, so the forward takes one online pass.
	exact bool
}

func newAttention(qkv *Tensor, heads int, probs dtype.DType) attention {
	if len(qkv.shape) != 3 || heads <= 0 || qkv.shape[2]%(3*heads) != 0 {
		panic(fmt.Sprintf("tensor: causal attention of %v with %d heads, want [B, T, 3·heads·hs]", qkv, heads))
	}
	compute := statsDType(qkv.dtype)
	if probs != qkv.dtype && probs != compute {
		panic(fmt.Sprintf("tensor: causal attention of %v with probabilities in %s, want %s or %s", qkv, probs, qkv.dtype, compute))
	}
	width := qkv.shape[2] / 3
	return attention{
		batch: qkv.shape[0], seq: qkv.shape[1], width: width, heads: heads, hs: width / heads,
		dt: qkv.dtype, probs: probs, exact: qkv.dtype == compute && probs == compute,
	}
}

// tiles is the number of query (or key) tiles of a sequence.
func (a attention) tiles() int { return (a.seq + attnTile - 1) / attnTile }

// operand returns head h of part (0 q, 1 k, 2 v) of qkv from row t of
// batch b on, for a tile product.
func (a attention) operand(qkv *Tensor, part, b, h, t int, trans bool) gemm.Matrix {
	return operand3(qkv, (b*a.seq+t)*3*a.width+part*a.width+h*a.hs, 3*a.width, trans)
}

// rows returns head h of y (or dy) from row t of batch b on.
func (a attention) rows(y *Tensor, b, h, t int) gemm.Matrix {
	return operand3(y, (b*a.seq+t)*a.width+h*a.hs, a.width, false)
}

func operand3(t *Tensor, off, ld int, trans bool) gemm.Matrix {
	start := t.dtype.StorageBytes(off)
	return gemm.Matrix{DType: t.dtype, Data: t.data[start:], LD: ld, Trans: trans}
}

// local describes a scratch tile of ld columns as a tile product's operand.
func local[T float](s []T, ld int, trans bool) gemm.Matrix {
	if isF64[T]() {
		return gemm.Matrix{DType: dtype.F64, Data: bytesOf(any(s).([]float64)), LD: ld, Trans: trans}
	}
	return gemm.Matrix{DType: dtype.F32, Data: bytesOf(any(s).([]float32)), LD: ld, Trans: trans}
}

// tileMul computes c = op(a)·op(b) + beta·c for one tile, accumulating in
// T: float64 operands must be F64.
func tileMul[T float](m, n, k int, a, b gemm.Matrix, beta T, c []T, ldc int) {
	if c64, ok := any(c).([]float64); ok {
		gemm.Dgemm(a.Trans, b.Trans, m, n, k, f64s(a.Data), a.LD, f64s(b.Data), b.LD, float64(beta), c64, ldc)
		return
	}
	gemm.F32(m, n, k, a, b, float32(beta), any(c).([]float32), ldc)
}

func f64s(b []byte) []float64 {
	return unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}

// storeRows rounds rows×cols values of src (row length cols) into t from
// element off on, ld elements between rows.
func storeRows[T float](t *Tensor, off, ld int, src []T, rows, cols int) {
	size := t.dtype.StorageBytes(1)
	for r := range rows {
		row := src[r*cols : (r+1)*cols]
		dst := t.data[(off+r*ld)*size:][:cols*size]
		switch v := any(row).(type) {
		case []float64:
			copy(f64s(dst), v)
		case []float32:
			dtype.Encode(t.dtype, dst, v, false)
		}
	}
}

// attnScratch is one goroutine's tiles.
type attnScratch[T float] struct {
	s, p    []T // attnTile² scores and probabilities (or their gradients)
	acc     []T // attnTile×hs output (or dq) accumulator
	m, l, d []T // per query row: running max and sum; Σ dP∘P
	dk, dv  []T // T×hs key and value gradient accumulators (backward only)
}

func (ws *attnScratch[T]) take(a attention, backward bool) {
	ws.s, ws.p, ws.acc = scratch[T](attnTile*attnTile), scratch[T](attnTile*attnTile), scratch[T](attnTile*a.hs)
	ws.m, ws.l, ws.d = scratch[T](attnTile), scratch[T](attnTile), scratch[T](attnTile)
	if backward {
		ws.dk, ws.dv = scratch[T](a.seq*a.hs), scratch[T](a.seq*a.hs)
	}
}

func (ws *attnScratch[T]) release() {
	for _, s := range [...][]T{ws.s, ws.p, ws.acc, ws.m, ws.l, ws.d, ws.dk, ws.dv} {
		if s != nil {
			release(s)
		}
	}
}

// scores computes the scaled, masked scores of queries [i0, i0+bq) against
// keys [j0, j0+bk) of head (b, h) into s (bq×bk), rounded as the op-by-op
// path rounds its q·kᵀ and its scaling.
func scores[T float](a attention, qkv *Tensor, b, h, i0, bq, j0, bk int, s []T) {
	round := roundTo[T](a.dt)
	tileMul(bq, bk, a.hs, a.operand(qkv, 0, b, h, i0, false), a.operand(qkv, 1, b, h, j0, true), 0, s, bk)
	round.all(s[:bq*bk])
	scale := T(1 / math.Sqrt(float64(a.hs)))
	if !isF64[T]() {
		scale = T(float32(1 / math.Sqrt(float64(a.hs)))) // a Python scalar in a float32 op
	}
	for i := range s[:bq*bk] {
		s[i] *= scale
	}
	round.all(s[:bq*bk])
	inf := T(math.Inf(-1))
	for r := range bq {
		for c := max(i0+r+1-j0, 0); c < bk; c++ {
			s[r*bk+c] = inf
		}
	}
}

// probabilities sets p to exp(s - lse) row by row (zero where masked),
// rounded to probs: the softmax the op-by-op path would have computed.
func probabilities[T float](a attention, s, p, lse []T, bq, bk int) {
	for r := range bq {
		for c, v := range s[r*bk : (r+1)*bk] {
			p[r*bk+c] = T(math.Exp(float64(v - lse[r])))
		}
	}
	roundTo[T](a.probs).all(p[:bq*bk])
}

// diagonal returns the end of the keys the queries [i0, i0+bq) see.
func diagonal(i0, bq int) int { return i0 + bq }

func attentionForward[T float](a attention, qkv, y, lse *Tensor) {
	units := a.batch * a.heads * a.tiles()
	// Units are split when the causal half of the products is worth it.
	if parts := min(parallelParts(a.batch*a.heads*a.seq*a.seq/2*a.hs), units); parts > 1 {
		parallelSplit(units, parts, func(lo, hi int) { forwardUnits[T](a, qkv, y, lse, lo, hi) })
	} else {
		forwardUnits[T](a, qkv, y, lse, 0, units)
	}
}

// forwardUnits computes the (b, h, query tile) units [lo, hi), numbered
// in that order.
func forwardUnits[T float](a attention, qkv, y, lse *Tensor, lo, hi int) {
	var ws attnScratch[T]
	ws.take(a, false)
	ls := view[T](lse)
	for u := lo; u < hi; u++ {
		bh, qt := u/a.tiles(), u%a.tiles()
		forwardTile(a, qkv, y, ls[bh*a.seq:], bh/a.heads, bh%a.heads, qt*attnTile, &ws)
	}
	ws.release()
}

// forwardTile computes queries [i0, i0+attnTile) of head (b, h) into y and
// their log-sum-exp into lse (the head's T entries).
func forwardTile[T float](a attention, qkv, y *Tensor, lse []T, b, h, i0 int, ws *attnScratch[T]) {
	bq, hs := min(attnTile, a.seq-i0), a.hs
	s, p, acc, m, l := ws.s, ws.p, ws.acc[:bq*hs], ws.m[:bq], ws.l[:bq]
	for r := range bq {
		m[r], l[r] = T(math.Inf(-1)), 0
	}
	clear(acc)
	for j0 := 0; j0 < diagonal(i0, bq); j0 += attnTile {
		bk := min(attnTile, a.seq-j0)
		scores(a, qkv, b, h, i0, bq, j0, bk, s)
		for r := range bq {
			row := s[r*bk : (r+1)*bk]
			mx := m[r]
			for _, v := range row {
				mx = max(mx, v)
			}
			alpha := T(math.Exp(float64(m[r] - mx)))
			var sum T
			for c, v := range row {
				p[r*bk+c] = T(math.Exp(float64(v - mx)))
				sum += p[r*bk+c]
			}
			m[r], l[r] = mx, l[r]*alpha+sum
			if a.exact {
				for c := range acc[r*hs : (r+1)*hs] {
					acc[r*hs+c] *= alpha
				}
			}
		}
		if a.exact {
			tileMul(bq, hs, bk, local(p, bk, false), a.operand(qkv, 2, b, h, j0, false), 1, acc, hs)
		}
	}
	for r := range bq {
		lse[i0+r] = m[r] + T(math.Log(float64(l[r])))
	}
	if a.exact {
		for r := range bq {
			for c := range acc[r*hs : (r+1)*hs] {
				acc[r*hs+c] /= l[r]
			}
		}
	} else {
		// The op-by-op path rounds the normalised P: a second pass makes
		// it with the final log-sum-exp.
		for j0 := 0; j0 < diagonal(i0, bq); j0 += attnTile {
			bk := min(attnTile, a.seq-j0)
			scores(a, qkv, b, h, i0, bq, j0, bk, s)
			probabilities(a, s, p, lse[i0:], bq, bk)
			roundTo[T](a.dt).all(p[:bq*bk]) // cast for the P·V GEMM
			tileMul(bq, hs, bk, local(p, bk, false), a.operand(qkv, 2, b, h, j0, false), 1, acc, hs)
		}
	}
	storeRows(y, (b*a.seq+i0)*a.width+h*hs, a.width, acc, bq, hs)
}

func attentionBackward[T float](a attention, qkv, y, lse, dy, dqkv *Tensor) {
	units := a.batch * a.heads
	if parts := min(parallelParts(units*a.seq*a.seq*a.hs), units); parts > 1 {
		parallelSplit(units, parts, func(lo, hi int) { backwardUnits[T](a, qkv, y, lse, dy, dqkv, lo, hi) })
	} else {
		backwardUnits[T](a, qkv, y, lse, dy, dqkv, 0, units)
	}
}

// backwardUnits computes the (b, h) units [lo, hi) of dqkv.
func backwardUnits[T float](a attention, qkv, y, lse, dy, dqkv *Tensor, lo, hi int) {
	var ws attnScratch[T]
	ws.take(a, true)
	ls := view[T](lse)
	var ys, gs []T // y and dy in the compute type, for rowsum(dy∘y)
	if a.exact {
		ys, gs = view[T](y), view[T](dy)
	}
	for bh := lo; bh < hi; bh++ {
		backwardHead(a, qkv, dy, dqkv, ys, gs, ls[bh*a.seq:][:a.seq], bh/a.heads, bh%a.heads, &ws)
	}
	ws.release()
}

// backwardHead writes head (b, h)'s part of dqkv.
func backwardHead[T float](a attention, qkv, dy, dqkv *Tensor, ys, gs, lse []T, b, h int, ws *attnScratch[T]) {
	hs, round, roundP := a.hs, roundTo[T](a.dt), roundTo[T](a.probs)
	scale := T(1 / math.Sqrt(float64(hs)))
	if !isF64[T]() {
		scale = T(float32(1 / math.Sqrt(float64(hs))))
	}
	dk, dv := ws.dk[:a.seq*hs], ws.dv[:a.seq*hs]
	clear(dk)
	clear(dv)
	s, p := ws.s, ws.p
	for i0 := 0; i0 < a.seq; i0 += attnTile {
		bq := min(attnTile, a.seq-i0)
		dq, d, dO := ws.acc[:bq*hs], ws.d[:bq], a.rows(dy, b, h, i0)
		rowLSE := lse[i0:]
		clear(d)
		if a.exact {
			for r := range bq {
				off := (b*a.seq+i0+r)*a.width + h*hs
				for c, g := range gs[off : off+hs] {
					d[r] += g * ys[off+c]
				}
			}
		} else {
			// Σ dP∘P over the rounded dP and P, in the op-by-op path's order.
			for j0 := 0; j0 < diagonal(i0, bq); j0 += attnTile {
				bk := min(attnTile, a.seq-j0)
				scores(a, qkv, b, h, i0, bq, j0, bk, s)
				probabilities(a, s, p, rowLSE, bq, bk)
				tileMul(bq, bk, hs, dO, a.operand(qkv, 2, b, h, j0, true), 0, s, bk) // dP
				round.all(s[:bq*bk])
				for r := range bq {
					for c := range bk {
						d[r] += s[r*bk+c] * p[r*bk+c]
					}
				}
			}
		}
		clear(dq)
		for j0 := 0; j0 < diagonal(i0, bq); j0 += attnTile {
			bk := min(attnTile, a.seq-j0)
			scores(a, qkv, b, h, i0, bq, j0, bk, s)
			probabilities(a, s, p, rowLSE, bq, bk)
			tileMul(bq, bk, hs, dO, a.operand(qkv, 2, b, h, j0, true), 0, s, bk) // dP
			round.all(s[:bq*bk])
			for r := range bq { // s becomes dS = P∘(dP - D)
				for c := range bk {
					s[r*bk+c] = p[r*bk+c] * (s[r*bk+c] - d[r])
				}
			}
			roundP.all(s[:bq*bk]) // the softmax's gradient
			round.all(s[:bq*bk])  // cast back to the scores' dtype
			for r := range bq {
				for c := max(i0+r+1-j0, 0); c < bk; c++ {
					s[r*bk+c] = 0 // masked_fill's gradient
				}
			}
			for i := range s[:bq*bk] {
				s[i] *= scale
			}
			round.all(s[:bq*bk])
			round.all(p[:bq*bk]) // P as the P·V GEMM took it
			tileMul(bk, hs, bq, local(p, bk, true), dO, 1, dv[j0*hs:], hs)
			tileMul(bq, hs, bk, local(s, bk, false), a.operand(qkv, 1, b, h, j0, false), 1, dq, hs)
			tileMul(bk, hs, bq, local(s, bk, true), a.operand(qkv, 0, b, h, i0, false), 1, dk[j0*hs:], hs)
		}
		storeRows(dqkv, (b*a.seq+i0)*3*a.width+h*hs, 3*a.width, dq, bq, hs)
	}
	storeRows(dqkv, b*a.seq*3*a.width+a.width+h*hs, 3*a.width, dk, a.seq, hs)
	storeRows(dqkv, b*a.seq*3*a.width+2*a.width+h*hs, 3*a.width, dv, a.seq, hs)
}

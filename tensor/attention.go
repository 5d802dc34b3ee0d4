package tensor

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/gemm"
)

// attnTile is the number of queries and of keys in one tile: a tile's
// scores (16 KiB in float32), or its strip of them at T=256, stay in L2
// with their operands while it runs.
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
// without materialising S or P for all of T: each tile of attnTile queries
// sees only the keys up to its diagonal (the fully masked key tiles are
// skipped). When nothing is rounded below the compute type it runs over
// its key tiles with an online softmax (a running maximum and sum per row,
// rescaling the accumulated P·V). Otherwise P must be rounded normalised,
// as the op-by-op path rounds it, which needs a row's final maximum and
// sum before any P·V: such a tile holds its strip of scores (attnTile×T,
// linear in T) and normalises it as softmax does.
//
// It also returns stats [B, heads, T, 2], each row's maximum and sum of
// exponentials in the compute type, from which the backward pass
// recomputes P exactly as the forward computed it: the only tensor besides
// qkv it keeps. The compute type is float64 for F64 qkv and float32
// otherwise; probs must be qkv's dtype or the compute type (F32 under
// autocast). (b, h, query tile) units are split between cores; each is
// computed the same way however they are split.
func CausalAttention(qkv *Tensor, heads int, probs dtype.DType) (y, stats *Tensor) {
	a := newAttention(qkv, heads, probs)
	if qkv.meta {
		return Meta(qkv.dtype, a.batch, a.seq, a.width), Meta(statsDType(qkv.dtype), a.batch, heads, a.seq, 2)
	}
	y = empty(qkv.dtype, a.batch, a.seq, a.width)
	stats = empty(statsDType(qkv.dtype), a.batch, heads, a.seq, 2)
	if qkv.dtype == dtype.F64 {
		attentionForward[float64](a, qkv, y, stats)
	} else {
		attentionForward[float32](a, qkv, y, stats)
	}
	return y, stats
}

// CausalAttentionBackward returns the gradient with respect to qkv of
// CausalAttention's y, given its input, its stats and dy (y's gradient),
// in the manner of FlashAttention-2: one query tile at a time, P is
// recomputed from q, k and stats over the keys the tile sees, and dP,
// dS, dq and the tile's share of dk and dv follow from it. The gradients
// are rounded where the op-by-op path's backward rounds them (dP = dy·Vᵀ,
// the scores' gradient and every product to qkv's dtype, the softmax's
// gradient to probs). (b, h) units are split between cores.
func CausalAttentionBackward(qkv, stats, dy *Tensor, heads int, probs dtype.DType) *Tensor {
	a := newAttention(qkv, heads, probs)
	if !EqualShape(dy.shape, []int{a.batch, a.seq, a.width}) || !EqualShape(stats.shape, []int{a.batch, heads, a.seq, 2}) {
		panic(fmt.Sprintf("tensor: attention backward of %v with stats %v and dy %v", qkv, stats, dy))
	}
	if anyMeta(qkv, dy) {
		return Meta(qkv.dtype, qkv.shape...)
	}
	dqkv := empty(qkv.dtype, qkv.shape...) // every element is written
	if qkv.dtype == dtype.F64 {
		attentionBackward[float64](a, qkv, stats, dy, dqkv)
	} else {
		attentionBackward[float32](a, qkv, stats, dy, dqkv)
	}
	return dqkv
}

// attention is the geometry and rounding of one call.
type attention struct {
	batch, seq, width, heads, hs int
	dt, probs                    dtype.DType
	// exact marks a call in which nothing is rounded below the compute
	// type, so the forward runs online.
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

// rows returns head h of y (or dy) from row t of batch b on.
func (a attention) rows(y *Tensor, b, h, t int) gemm.Matrix {
	return strided(y, (b*a.seq+t)*a.width+h*a.hs, a.width)
}

// strided is t from element off on as a product operand with rows ld
// elements apart.
func strided(t *Tensor, off, ld int) gemm.Matrix {
	return gemm.Matrix{DType: t.dtype, Data: t.data[t.dtype.StorageBytes(off):], LD: ld}
}

// local describes a scratch tile of ld columns as a tile product's operand.
func local[T float](s []T, ld int) gemm.Matrix {
	if isF64[T]() {
		return gemm.Matrix{DType: dtype.F64, Data: bytesOf(any(s).([]float64)), LD: ld}
	}
	return gemm.Matrix{DType: dtype.F32, Data: bytesOf(any(s).([]float32)), LD: ld}
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

// attnScratch is one goroutine's buffers.
type attnScratch[T float] struct {
	s, p   []T // attnTile×T strips of scores and probabilities (or their gradients)
	acc    []T // attnTile×hs output (or dq) accumulator
	d      []T // per query row: Σ dP∘P
	dk, dv []T // T×hs key and value gradient accumulators (backward)
	// ps and ss hold p and s stored in qkv's dtype, for narrow qkv.
	ps, ss []float32
}

func (ws *attnScratch[T]) take(a attention, backward bool) {
	ws.s, ws.p = scratch[T](attnTile*a.seq), scratch[T](attnTile*a.seq)
	ws.acc, ws.d = scratch[T](attnTile*a.hs), scratch[T](attnTile)
	if !a.exact {
		ws.ps, ws.ss = scratch[float32](attnTile*a.seq), scratch[float32](attnTile*a.seq)
	}
	if backward {
		ws.dk, ws.dv = scratch[T](a.seq*a.hs), scratch[T](a.seq*a.hs)
	}
}

func (ws *attnScratch[T]) release() {
	for _, s := range [...][]T{ws.s, ws.p, ws.acc, ws.d, ws.dk, ws.dv} {
		if s != nil {
			release(s)
		}
	}
	for _, s := range [...][]float32{ws.ps, ws.ss} {
		if s != nil {
			release(s)
		}
	}
}

// head returns rows from t0 on of head h of part (0 q, 1 k, 2 v) of batch
// b of qkv as a product operand, where they lie.
func head(a attention, qkv *Tensor, part, b, h, t0 int) gemm.Matrix {
	return strided(qkv, (b*a.seq+t0)*3*a.width+part*a.width+h*a.hs, 3*a.width)
}

// stored returns the strip x (n elements, rows ld apart, already rounded
// to qkv's dtype) as a product operand: x itself when nothing is rounded,
// else x stored in qkv's dtype in buf, so that a product of two bf16
// operands runs on the bf16 kernel as the op-by-op path's does.
func stored[T float](a attention, x []T, n, ld int, buf []float32) gemm.Matrix {
	if a.exact {
		return local(x, ld)
	}
	data := bytesOf(buf)[:a.dt.StorageBytes(n)]
	dtype.Encode(a.dt, data, any(x[:n]).([]float32), false)
	return gemm.Matrix{DType: a.dt, Data: data, LD: ld}
}

// scaleOf is 1/√hs in T: a Python scalar, rounded to float32 in a float32 op.
func scaleOf[T float](hs int) T {
	s := 1 / math.Sqrt(float64(hs))
	if isF64[T]() {
		return T(s)
	}
	return T(float32(s))
}

// from returns m from row r on, transposed if trans.
func from(m gemm.Matrix, r int, trans bool) gemm.Matrix {
	m.Data, m.Trans = m.Data[m.DType.StorageBytes(r*m.LD):], trans
	return m
}

// scores computes the scaled, masked scores of the bq queries of q (from
// query i0 on) against keys [j0, j0+bk) of k into s (bq rows of ld),
// rounded as the op-by-op path rounds its q·kᵀ and its scaling.
func scores[T float](a attention, q, k gemm.Matrix, i0, bq, j0, bk int, s []T, ld int) {
	round := roundTo[T](a.dt)
	tileMul(bq, bk, a.hs, q, from(k, j0, true), 0, s, ld)
	scale, inf := scaleOf[T](a.hs), T(math.Inf(-1))
	for r := range bq {
		row := s[r*ld:][:bk]
		round.all(row)
		for c := range row {
			row[c] *= scale
		}
		round.all(row)
		for c := max(i0+r+1-j0, 0); c < bk; c++ {
			row[c] = inf
		}
	}
}

// probabilities sets p to exp(s - max)/sum row by row for the strip of
// queries from i0 on against keys [0, i0+bq) (rows ld apart), as the
// op-by-op softmax computes it, from each row's maximum and sum in stats;
// with fresh, it first computes those from s. The masked entries are
// zero, without an exp.
func probabilities[T float](s, p, stats []T, i0, bq, ld int, fresh bool) {
	for r := range bq {
		seen := i0 + r + 1 // keys [0, seen) are not masked
		row, out := s[r*ld:][:seen], p[r*ld:][:seen]
		clear(p[r*ld+seen : r*ld+i0+bq])
		if fresh {
			mx, sum := expRow(out, row, T(math.Inf(-1)))
			stats[2*r], stats[2*r+1] = mx, sum
			for c := range out {
				out[c] /= sum
			}
			continue
		}
		mx, sum := stats[2*r], stats[2*r+1]
		expShifted(out, row, mx)
		for c := range out {
			out[c] /= sum
		}
	}
}

func attentionForward[T float](a attention, qkv, y, stats *Tensor) {
	units := a.batch * a.heads * a.tiles()
	// Units are split when the causal half of the products is worth it.
	if parts := min(parallelParts(a.batch*a.heads*a.seq*a.seq/2*a.hs), units); parts > 1 {
		parallelSplit(units, parts, func(lo, hi int) { forwardUnits[T](a, qkv, y, stats, lo, hi) })
	} else {
		forwardUnits[T](a, qkv, y, stats, 0, units)
	}
}

// forwardUnits computes the (b, h, query tile) units [lo, hi), numbered
// in that order, into y and stats.
func forwardUnits[T float](a attention, qkv, y, stats *Tensor, lo, hi int) {
	var ws attnScratch[T]
	ws.take(a, false)
	st := view[T](stats)
	for u := lo; u < hi; u++ {
		bh, i0 := u/a.tiles(), u%a.tiles()*attnTile
		b, h := bh/a.heads, bh%a.heads
		bq := min(attnTile, a.seq-i0) // seeing keys [0, i0+bq): the tiles beyond are skipped
		q, k, v := head(a, qkv, 0, b, h, i0), head(a, qkv, 1, b, h, 0), head(a, qkv, 2, b, h, 0)
		rowStats := st[2*(bh*a.seq+i0):][:2*bq]
		if a.exact {
			forwardOnline(a, q, k, v, i0, bq, rowStats, &ws)
		} else {
			forwardRounded(a, q, k, v, i0, bq, rowStats, &ws)
		}
		storeRows(y, (b*a.seq+i0)*a.width+h*a.hs, a.width, ws.acc, bq, a.hs)
	}
	ws.release()
}

// forwardOnline computes a query tile key tile by key tile with a running
// maximum and sum per row, rescaling the accumulated P·V as the maximum
// grows, and leaves the output in ws.acc.
func forwardOnline[T float](a attention, q, k, v gemm.Matrix, i0, bq int, stats []T, ws *attnScratch[T]) {
	hs, s, p := a.hs, ws.s, ws.p
	acc := ws.acc[:bq*hs]
	clear(acc)
	for r := range bq {
		stats[2*r], stats[2*r+1] = T(math.Inf(-1)), 0
	}
	for j0 := 0; j0 < i0+bq; j0 += attnTile {
		bk := min(attnTile, i0+bq-j0)
		scores(a, q, k, i0, bq, j0, bk, s, bk)
		for r := range bq {
			seen := min(i0+r+1-j0, bk) // keys j0+[0, seen) are not masked
			row, out := s[r*bk:][:seen], p[r*bk:][:seen]
			clear(p[r*bk+seen : (r+1)*bk])
			mx, sum := expRow(out, row, stats[2*r])
			alpha := T(math.Exp(float64(stats[2*r] - mx)))
			stats[2*r], stats[2*r+1] = mx, stats[2*r+1]*alpha+sum
			if alpha != 1 {
				for c := range acc[r*hs : (r+1)*hs] {
					acc[r*hs+c] *= alpha
				}
			}
		}
		tileMul(bq, hs, bk, local(p, bk), from(v, j0, false), 1, acc, hs)
	}
	for r := range bq {
		for c := range acc[r*hs : (r+1)*hs] {
			acc[r*hs+c] /= stats[2*r+1]
		}
	}
}

// forwardRounded computes a query tile whose probabilities are rounded:
// the op-by-op path rounds them normalised, which needs each row's final
// maximum and sum before any P·V, so the tile's strip of scores (bq×kv,
// linear in T) is held and normalised as softmax does it.
func forwardRounded[T float](a attention, q, k, v gemm.Matrix, i0, bq int, stats []T, ws *attnScratch[T]) {
	kv, s, p := i0+bq, ws.s, ws.p
	scores(a, q, k, i0, bq, 0, kv, s, kv)
	probabilities(s, p, stats, i0, bq, kv, true)
	roundTo[T](a.probs).all(p[:bq*kv])
	roundTo[T](a.dt).all(p[:bq*kv]) // cast for the P·V GEMM
	tileMul(bq, a.hs, kv, stored(a, p, bq*kv, kv, ws.ps), v, 0, ws.acc, a.hs)
}

func attentionBackward[T float](a attention, qkv, stats, dy, dqkv *Tensor) {
	units := a.batch * a.heads
	if parts := min(parallelParts(units*a.seq*a.seq*a.hs), units); parts > 1 {
		parallelSplit(units, parts, func(lo, hi int) { backwardUnits[T](a, qkv, stats, dy, dqkv, lo, hi) })
	} else {
		backwardUnits[T](a, qkv, stats, dy, dqkv, 0, units)
	}
}

// backwardUnits computes the (b, h) units [lo, hi) of dqkv.
func backwardUnits[T float](a attention, qkv, stats, dy, dqkv *Tensor, lo, hi int) {
	var ws attnScratch[T]
	ws.take(a, true)
	st := view[T](stats)
	for bh := lo; bh < hi; bh++ {
		backwardHead(a, qkv, dy, dqkv, st[2*bh*a.seq:][:2*a.seq], bh/a.heads, bh%a.heads, &ws)
	}
	ws.release()
}

// backwardHead writes head (b, h)'s part of dqkv, one query tile at a
// time over the strip of keys it sees.
func backwardHead[T float](a attention, qkv, dy, dqkv *Tensor, stats []T, b, h int, ws *attnScratch[T]) {
	hs, round, roundP, scale := a.hs, roundTo[T](a.dt), roundTo[T](a.probs), scaleOf[T](a.hs)
	q, k, v := head(a, qkv, 0, b, h, 0), head(a, qkv, 1, b, h, 0), head(a, qkv, 2, b, h, 0)
	dk, dv := ws.dk[:a.seq*hs], ws.dv[:a.seq*hs]
	clear(dk)
	clear(dv)
	s, p := ws.s, ws.p
	for i0 := 0; i0 < a.seq; i0 += attnTile {
		bq := min(attnTile, a.seq-i0)
		kv, qi, dO, dq, d := i0+bq, from(q, i0, false), a.rows(dy, b, h, i0), ws.acc[:bq*hs], ws.d[:bq]
		scores(a, qi, k, i0, bq, 0, kv, s, kv)
		probabilities(s, p, stats[2*i0:], i0, bq, kv, false)
		roundP.all(p[:bq*kv])                               // P as softmax left it
		tileMul(bq, kv, hs, dO, from(v, 0, true), 0, s, kv) // s becomes dP = dy·Vᵀ
		round.all(s[:bq*kv])
		// dS = P∘(dP - Σ dP∘P), summed in the op-by-op path's order
		// rather than as rowsum(dy∘y): both are at hand, and it rounds alike.
		for r := range bq {
			var dot T
			for c := range kv {
				dot += s[r*kv+c] * p[r*kv+c]
			}
			d[r] = dot
		}
		for r := range bq {
			for c := range kv {
				s[r*kv+c] = p[r*kv+c] * (s[r*kv+c] - d[r])
			}
		}
		roundP.all(s[:bq*kv]) // the softmax's gradient
		round.all(s[:bq*kv])  // cast back to the scores' dtype
		for r := range bq {
			for c := i0 + r + 1; c < kv; c++ {
				s[r*kv+c] = 0 // masked_fill's gradient
			}
		}
		for i := range s[:bq*kv] {
			s[i] *= scale
		}
		round.all(s[:bq*kv])
		round.all(p[:bq*kv]) // P as the P·V GEMM took it
		pm, sm := stored(a, p, bq*kv, kv, ws.ps), stored(a, s, bq*kv, kv, ws.ss)
		tileMul(kv, hs, bq, from(pm, 0, true), dO, 1, dv, hs)
		tileMul(bq, hs, kv, sm, k, 0, dq, hs)
		tileMul(kv, hs, bq, from(sm, 0, true), qi, 1, dk, hs)
		storeRows(dqkv, (b*a.seq+i0)*3*a.width+h*hs, 3*a.width, dq, bq, hs)
	}
	storeRows(dqkv, b*a.seq*3*a.width+a.width+h*hs, 3*a.width, dk, a.seq, hs)
	storeRows(dqkv, b*a.seq*3*a.width+2*a.width+h*hs, 3*a.width, dv, a.seq, hs)
}

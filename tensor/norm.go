package tensor

import (
	"fmt"
	"math"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/vec"
)

// statsDType is the compute type of per-row values (a norm's saved mean and
// rstd, cross-entropy's log-probabilities): float64 for float64, else float32.
func statsDType(dt dtype.DType) dtype.DType {
	if dt == dtype.F64 {
		return dtype.F64
	}
	return dtype.F32
}

// LayerNorm normalises over the last axis with biased variance:
// y = (x-mean)·rstd·w + b, rstd = 1/sqrt(var+eps). It also returns mean and
// rstd (one per row, in the compute type) for the backward pass.
func LayerNorm(x, w, b *Tensor, eps float64) (y, mean, rstd *Tensor) {
	c := x.Dim(-1)
	rows := x.Len() / c
	if anyMeta(x, w, b) {
		dt := promoteAll(x, w, b)
		return Meta(dt, x.shape...), Meta(statsDType(dt), rows), Meta(statsDType(dt), rows)
	}
	y = empty(promoteAll(x, w, b), x.shape...)
	mean, rstd = New(statsDType(y.dtype), rows), New(statsDType(y.dtype), rows)
	if y.dtype == dtype.F64 {
		layerNorm[float64](y, x, w, b, mean, rstd, eps)
	} else {
		layerNorm[float32](y, x, w, b, mean, rstd, eps)
	}
	return y, mean, rstd
}

func layerNorm[T float](y, x, w, b, mean, rstd *Tensor, eps float64) {
	c := x.Dim(-1)
	xs, ws, bs, ys := get[T](x), get[T](w), get[T](b), buf[T](y)
	ms, rs := view[T](mean), view[T](rstd)
	// Rows are independent: large inputs split across cores (a single
	// range skips building the closure).
	if parts := parallelParts(len(xs)); parts <= 1 {
		layerNormRows(ys, xs, ws, bs, ms, rs, eps)
	} else {
		parallelSplit(len(ms), parts, func(lo, hi int) {
			layerNormRows(ys[lo*c:hi*c], xs[lo*c:hi*c], ws, bs, ms[lo:hi], rs[lo:hi], eps)
		})
	}
	put(y, ys)
	drop(x, xs)
	drop(w, ws)
	drop(b, bs)
}

// layerNormRows normalises the rows of xs (of len(ws) elements each).
func layerNormRows[T float](ys, xs, ws, bs, ms, rs []T, eps float64) {
	c := len(ws)
	for r := range ms {
		row := xs[r*c : (r+1)*c]
		var sum T
		for _, v := range row {
			sum += v
		}
		mu := sum / T(c)
		var sq T
		for _, v := range row {
			sq += (v - mu) * (v - mu)
		}
		rs[r] = T(1 / math.Sqrt(float64(sq/T(c))+eps))
		ms[r] = mu
		out := ys[r*c : (r+1)*c]
		for j, v := range row {
			out[j] = (v-mu)*rs[r]*ws[j] + bs[j]
		}
	}
}

// LayerNormBackward returns the gradients of x, w and b.
func LayerNormBackward(x, w, mean, rstd, dy *Tensor) (dx, dw, db *Tensor) {
	dx = New(promoteAll(x, w, dy), x.shape...)
	dw, db = New(w.dtype, w.shape...), New(w.dtype, w.shape...)
	if dx.dtype == dtype.F64 {
		layerNormBackward[float64](dx, dw, db, x, w, mean, rstd, dy)
	} else {
		layerNormBackward[float32](dx, dw, db, x, w, mean, rstd, dy)
	}
	return dx, dw, db
}

func layerNormBackward[T float](dx, dw, db, x, w, mean, rstd, dy *Tensor) {
	c := x.Dim(-1)
	xs, ws, gs, dxs := get[T](x), get[T](w), get[T](dy), buf[T](dx)
	ms, rs := get[T](mean), get[T](rstd)
	dws, dbs := scratch[T](c), scratch[T](c)
	clear(dws)
	clear(dbs)
	// dx is row by row, split by ranges of rows; dw and db sum over all
	// rows in order, split by ranges of columns in a second pass: the
	// same bits on any number of cores. One core takes a single pass.
	if parts := parallelParts(len(xs)); parts <= 1 {
		layerNormBackwardRows(dxs, xs, ws, gs, ms, rs, dws, dbs)
	} else {
		parallelSplit(len(ms), parts, func(lo, hi int) {
			layerNormBackwardRows(dxs[lo*c:hi*c], xs[lo*c:hi*c], ws, gs[lo*c:hi*c], ms[lo:hi], rs[lo:hi], nil, nil)
		})
		parallelSplit(c, min(parts, c), func(lo, hi int) { layerNormParamGrads(dws, dbs, xs, gs, ms, rs, lo, hi) })
	}
	put(dx, dxs)
	storeAs(dw, dws)
	storeAs(db, dbs)
	release(dws)
	release(dbs)
	drop(x, xs)
	drop(w, ws)
	drop(dy, gs)
	drop(mean, ms)
	drop(rstd, rs)
}

// layerNormBackwardRows computes the rows of dx (of len(ws) elements each)
// and, unless they are nil, adds the rows' dy·x̂ and dy to dws and dbs.
func layerNormBackwardRows[T float](dxs, xs, ws, gs, ms, rs, dws, dbs []T) {
	c := len(ws)
	xhat, dxhat := scratch[T](c), scratch[T](c)
	for r := range ms {
		row, g := xs[r*c:(r+1)*c], gs[r*c:(r+1)*c]
		var sumD, sumDX T
		for j := range c {
			xhat[j] = (row[j] - ms[r]) * rs[r]
			dxhat[j] = g[j] * ws[j]
			sumD += dxhat[j]
			sumDX += dxhat[j] * xhat[j]
			if dws != nil {
				dws[j] += g[j] * xhat[j]
				dbs[j] += g[j]
			}
		}
		meanD, meanDX := sumD/T(c), sumDX/T(c)
		for j := range c {
			dxs[r*c+j] = rs[r] * (dxhat[j] - meanD - xhat[j]*meanDX)
		}
	}
	release(xhat)
	release(dxhat)
}

// layerNormParamGrads adds to dws[lo:hi] and dbs[lo:hi] the columns
// [lo, hi) of dy·x̂ and dy, row after row.
func layerNormParamGrads[T float](dws, dbs, xs, gs, ms, rs []T, lo, hi int) {
	c := len(dws)
	dw, db := dws[lo:hi], dbs[lo:hi]
	for r := range ms {
		row, g := xs[r*c+lo:r*c+hi], gs[r*c+lo:r*c+hi]
		for j := range dw {
			xhat := (row[j] - ms[r]) * rs[r]
			dw[j] += g[j] * xhat
			db[j] += g[j]
		}
	}
}

// Softmax normalises exp(x) over the last axis.
func Softmax(x *Tensor) *Tensor {
	if x.meta {
		return Meta(x.dtype, x.shape...)
	}
	y := empty(x.dtype, x.shape...)
	if x.dtype == dtype.F64 {
		softmax[float64](y, x)
	} else {
		softmax[float32](y, x)
	}
	return y
}

func softmax[T float](y, x *Tensor) {
	c := x.Dim(-1)
	xs, ys := get[T](x), buf[T](y)
	if parts := parallelParts(len(xs)); parts <= 1 {
		softmaxRows(ys, xs, c)
	} else {
		parallelSplit(len(xs)/c, parts, func(lo, hi int) { softmaxRows(ys[lo*c:hi*c], xs[lo*c:hi*c], c) })
	}
	put(y, ys)
	drop(x, xs)
}

// softmaxRows normalises each row of c elements of xs into ys.
func softmaxRows[T float](ys, xs []T, c int) {
	for r := 0; r < len(xs); r += c {
		out := ys[r : r+c]
		_, sum := expRow(out, xs[r:r+c], T(math.Inf(-1)))
		for j := range out {
			out[j] /= sum
		}
	}
}

// expRow sets out to exp(row - mx), where mx is the larger of from and
// row's maximum, and returns mx and the sum of out, summed in order.
func expRow[T float](out, row []T, from T) (mx, sum T) {
	mx = from
	for _, v := range row {
		mx = max(mx, v)
	}
	expShifted(out, row, mx)
	for _, v := range out {
		sum += v
	}
	return mx, sum
}

// expShifted sets out to exp(row - mx), each rounded to T; out may be row.
func expShifted[T float](out, row []T, mx T) {
	for j, v := range row {
		out[j] = v - mx
	}
	expInPlace(out)
}

// expInPlace sets each x to T(math.Exp(float64(x))), by vec.ExpF32 (the
// same bits, faster) for float32.
func expInPlace[T float](xs []T) {
	if x32, ok := any(xs).([]float32); ok {
		vec.ExpF32(x32, x32)
		return
	}
	for j, v := range xs {
		xs[j] = T(math.Exp(float64(v)))
	}
}

// SoftmaxBackward returns y·(dy - Σ dy·y) over the last axis, y being Softmax's output.
func SoftmaxBackward(y, dy *Tensor) *Tensor {
	dx := New(promoteAll(y, dy), y.shape...)
	if dx.dtype == dtype.F64 {
		softmaxBackward[float64](dx, y, dy)
	} else {
		softmaxBackward[float32](dx, y, dy)
	}
	return dx
}

func softmaxBackward[T float](dx, y, dy *Tensor) {
	c := y.Dim(-1)
	ys, gs, out := get[T](y), get[T](dy), buf[T](dx)
	if parts := parallelParts(len(ys)); parts <= 1 {
		softmaxBackwardRows(out, ys, gs, c)
	} else {
		parallelSplit(len(ys)/c, parts, func(lo, hi int) {
			softmaxBackwardRows(out[lo*c:hi*c], ys[lo*c:hi*c], gs[lo*c:hi*c], c)
		})
	}
	put(dx, out)
	drop(y, ys)
	drop(dy, gs)
}

// softmaxBackwardRows computes y·(dy - Σ dy·y) row by row.
func softmaxBackwardRows[T float](out, ys, gs []T, c int) {
	for r := 0; r < len(ys); r += c {
		var dot T
		for j := range c {
			dot += gs[r+j] * ys[r+j]
		}
		for j := range c {
			out[r+j] = ys[r+j] * (gs[r+j] - dot)
		}
	}
}

// CrossEntropy returns the mean over rows of -log softmax(logits)[target]
// for logits [N, C]; targets must lie in [0, C).
func CrossEntropy(logits *Tensor, targets []int) (*Tensor, error) {
	logp, err := TargetLogProbs(logits, targets)
	if err != nil {
		return nil, err
	}
	defer Free(logp)
	return NLLMean(logp, logits.dtype), nil
}

// TargetLogProbs returns log softmax(row i of logits)[targets[i]] for
// logits [N, C], [N] in the compute type (float64 for float64 logits,
// float32 for the others: nothing rounds between the halves):
// CrossEntropy's first half, which rows can compute apart (ranks, each on
// its rows) before NLLMean joins them.
func TargetLogProbs(logits *Tensor, targets []int) (*Tensor, error) {
	n, c := logits.Dim(0), logits.Dim(-1)
	if logits.meta && targets == nil { // a plan's batch of shapes alone
		return Meta(statsDType(logits.dtype), n), nil
	}
	if len(targets) != n {
		return nil, fmt.Errorf("tensor: cross entropy of %d rows with %d targets", n, len(targets))
	}
	for i, t := range targets {
		if t < 0 || t >= c {
			return nil, fmt.Errorf("tensor: cross entropy target %d at row %d is outside [0, %d)", t, i, c)
		}
	}
	compute := statsDType(logits.dtype)
	if logits.meta {
		return Meta(compute, n), nil
	}
	logp := empty(compute, n)
	if compute == dtype.F64 {
		targetLogProbs(view[float64](logp), logits, targets)
	} else {
		targetLogProbs(view[float32](logp), logits, targets)
	}
	return logp, nil
}

// NLLMean returns the mean of -logp (TargetLogProbs' result, of any
// rows), summed as CrossEntropy sums it, as a scalar of dtype dt.
func NLLMean(logp *Tensor, dt dtype.DType) *Tensor {
	if logp.meta {
		return Meta(dt)
	}
	loss := New(dt)
	if logp.dtype == dtype.F64 {
		nllMean(loss, view[float64](logp))
	} else {
		nllMean(loss, view[float32](logp))
	}
	return loss
}

// targetLogProbs computes log_softmax per row as PyTorch's CUDA kernels do,
// by a warp (logSumExpShifted), split across cores.
func targetLogProbs[T float](logp []T, logits *Tensor, targets []int) {
	c, zs := logits.Dim(-1), get[T](logits)
	defer drop(logits, zs)
	if parts := min(parallelParts(len(zs)), len(targets)); parts <= 1 {
		logProbs(logp, zs, targets, c)
	} else {
		parallelSplit(len(targets), parts, func(lo, hi int) { logProbs(logp[lo:hi], zs[lo*c:hi*c], targets[lo:hi], c) })
	}
}

// nllMean sums -logp in the order of PyTorch's nll_loss, so that a float32
// loss matches PyTorch's bit for bit: strided partial sums over a block of
// nllThreads, combined by a halving tree.
func nllMean[T float](loss *Tensor, ls []T) {
	partial := scratch[T](nllThreads(len(ls)))
	defer release(partial)
	clear(partial)
	for i, l := range ls {
		partial[i%len(partial)] -= l
	}
	for stride := len(partial) / 2; stride > 0; stride /= 2 {
		for i := range stride {
			partial[i] += partial[i+stride]
		}
	}
	out := buf[T](loss)
	out[0] = partial[0] / T(len(ls))
	put(loss, out)
}

// logProbs sets logp[i] to log softmax(row i of zs)[targets[i]], for rows of c.
func logProbs[T float](logp, zs []T, targets []int, c int) {
	exps := scratch[T](c)
	defer release(exps)
	for i, t := range targets {
		row := zs[i*c : (i+1)*c]
		logp[i] = (row[t] - row[maxIndex(row)]) - logSumExpShifted(row, exps)
	}
}

// nllThreads is the block size of PyTorch's nll_loss reduction:
// clamp(2^round(log2(n/16)), 32, 1024), which is 32 below 16 rows.
func nllThreads(n int) int {
	if n < 16 {
		return 32
	}
	return min(max(1<<int(math.Round(math.Log2(float64(n/16)))), 32), 1024)
}

func maxIndex[T float](row []T) int {
	m := 0
	for j, v := range row {
		if v > row[m] {
			m = j
		}
	}
	return m
}

// logSumExpShifted returns log Σ exp(x - max) over row, reduced as CUDA's
// persistent softmax does for rows of up to 1024: lane l of a warp of
// min(pow2(len), 32) lanes sums elements l, l+w, ... in turn, then the
// lanes combine by butterfly (xor-shuffle) steps of w/2, ..., 1. It keeps
// the exponentials in exps, of len(row).
func logSumExpShifted[T float](row, exps []T) T {
	mx := row[maxIndex(row)]
	w := 1
	for w < len(row) && w < 32 {
		w *= 2
	}
	var sums [32]T
	expShifted(exps, row, mx)
	for j, e := range exps {
		sums[j%w] += e
	}
	for off := w / 2; off >= 1; off /= 2 {
		var next [32]T
		for l := range w {
			next[l] = sums[l] + sums[l^off]
		}
		sums = next
	}
	return T(math.Log(float64(sums[0])))
}

// CrossEntropyBackward returns dloss·(softmax(logits) - onehot(targets))/N.
func CrossEntropyBackward(logits *Tensor, targets []int, dloss *Tensor) *Tensor {
	dz := New(logits.dtype, logits.shape...)
	if dz.dtype == dtype.F64 {
		crossEntropyBackward[float64](dz, logits, targets, dloss)
	} else {
		crossEntropyBackward[float32](dz, logits, targets, dloss)
	}
	return dz
}

func crossEntropyBackward[T float](dz, logits *Tensor, targets []int, dloss *Tensor) {
	c := logits.Dim(-1)
	zs, out, ds := get[T](logits), buf[T](dz), get[T](dloss)
	scale := ds[0] / T(len(targets))
	drop(dloss, ds)
	if parts := min(parallelParts(len(zs)), len(targets)); parts <= 1 {
		crossEntropyGrads(out, zs, targets, c, scale)
	} else {
		parallelSplit(len(targets), parts, func(lo, hi int) {
			crossEntropyGrads(out[lo*c:hi*c], zs[lo*c:hi*c], targets[lo:hi], c, scale)
		})
	}
	put(dz, out)
	drop(logits, zs)
}

// crossEntropyGrads sets the rows (of c) of out to scale·(softmax(row) - onehot).
func crossEntropyGrads[T float](out, zs []T, targets []int, c int, scale T) {
	for i, t := range targets {
		row := zs[i*c : (i+1)*c]
		grads := out[i*c : (i+1)*c]
		mx, ls := row[maxIndex(row)], logSumExpShifted(row, grads)
		for j, v := range row {
			// The log-probability rounded as the forward pass rounds it.
			grads[j] = (v - mx) - ls
		}
		expInPlace(grads)
		for j := range grads {
			grads[j] *= scale
		}
		grads[t] -= scale
	}
}

// RMSNorm scales each row of the last axis by its reciprocal root mean
// square: y = x·rstd·w, rstd = 1/sqrt(mean(x²)+eps) (Llama's norm, no mean
// subtracted, no bias). It also returns rstd (one per row, in the compute
// type) for the backward pass.
func RMSNorm(x, w *Tensor, eps float64) (y, rstd *Tensor) {
	rows := x.Len() / x.Dim(-1)
	if anyMeta(x, w) {
		dt := promoteAll(x, w)
		return Meta(dt, x.shape...), Meta(statsDType(dt), rows)
	}
	y = empty(promoteAll(x, w), x.shape...)
	rstd = New(statsDType(y.dtype), rows)
	if y.dtype == dtype.F64 {
		rmsNorm[float64](y, x, w, rstd, eps)
	} else {
		rmsNorm[float32](y, x, w, rstd, eps)
	}
	return y, rstd
}

func rmsNorm[T float](y, x, w, rstd *Tensor, eps float64) {
	c := x.Dim(-1)
	xs, ws, ys, rs := get[T](x), get[T](w), buf[T](y), view[T](rstd)
	if parts := parallelParts(len(xs)); parts <= 1 {
		rmsNormRows(ys, xs, ws, rs, eps)
	} else {
		parallelSplit(len(rs), parts, func(lo, hi int) { rmsNormRows(ys[lo*c:hi*c], xs[lo*c:hi*c], ws, rs[lo:hi], eps) })
	}
	put(y, ys)
	drop(x, xs)
	drop(w, ws)
}

// rmsNormRows normalises the rows of xs (of len(ws) elements each).
func rmsNormRows[T float](ys, xs, ws, rs []T, eps float64) {
	c := len(ws)
	for r := range rs {
		row := xs[r*c : (r+1)*c]
		var sq T
		for _, v := range row {
			sq += v * v
		}
		rs[r] = T(1 / math.Sqrt(float64(sq/T(c))+eps))
		out := ys[r*c : (r+1)*c]
		for j, v := range row {
			out[j] = v * rs[r] * ws[j]
		}
	}
}

// RMSNormBackward returns the gradients of x and w: with x̂ = x·rstd,
// dx = rstd·(dy·w − x̂·mean(dy·w·x̂)) and dw = Σ_rows dy·x̂.
func RMSNormBackward(x, w, rstd, dy *Tensor) (dx, dw *Tensor) {
	dx = New(promoteAll(x, w, dy), x.shape...)
	dw = New(w.dtype, w.shape...)
	if dx.dtype == dtype.F64 {
		rmsNormBackward[float64](dx, dw, x, w, rstd, dy)
	} else {
		rmsNormBackward[float32](dx, dw, x, w, rstd, dy)
	}
	return dx, dw
}

func rmsNormBackward[T float](dx, dw, x, w, rstd, dy *Tensor) {
	c := x.Dim(-1)
	xs, ws, gs, rs, dxs := get[T](x), get[T](w), get[T](dy), get[T](rstd), buf[T](dx)
	dws := scratch[T](c)
	clear(dws)
	for r := range rs {
		row, g := xs[r*c:(r+1)*c], gs[r*c:(r+1)*c]
		var dot T
		for j := range c {
			xhat := row[j] * rs[r]
			dot += g[j] * ws[j] * xhat
			dws[j] += g[j] * xhat
		}
		mean := dot / T(c)
		for j := range c {
			dxs[r*c+j] = rs[r] * (g[j]*ws[j] - row[j]*rs[r]*mean)
		}
	}
	put(dx, dxs)
	storeAs(dw, dws)
	release(dws)
	drop(x, xs)
	drop(w, ws)
	drop(dy, gs)
	drop(rstd, rs)
}

package tensor

import (
	"fmt"
	"slices"

	"github.com/weftml/weft/dtype"
)

// elemSize is the bytes per element of a byte-addressable dtype.
func elemSize(t *Tensor) int {
	t.stored("a copy")
	if t.dtype.Bits() < 8 {
		panic(fmt.Sprintf("tensor: %s elements are not byte-addressable", t.dtype))
	}
	return t.dtype.Bits() / 8
}

// Permute returns a contiguous copy of x with its axes reordered: output
// axis i is input axis perm[i]. Values are copied bit for bit, in runs of
// the last axis when it stays last (as in attention's head split).
func Permute(x *Tensor, perm ...int) *Tensor {
	rank := len(x.shape)
	if len(perm) != rank || rank > maxPermuteRank {
		panic(fmt.Sprintf("tensor: permutation %v for %v (at most %d axes)", slices.Clone(perm), x, maxPermuteRank))
	}
	var inStrides, shape, strides [maxPermuteRank]int
	for i, s := rank-1, 1; i >= 0; i-- {
		inStrides[i] = s
		s *= x.shape[i]
	}
	for i, p := range perm {
		shape[i], strides[i] = x.shape[p], inStrides[p]
	}
	if x.meta {
		return Meta(x.dtype, shape[:rank]...)
	}
	out := empty(x.dtype, shape[:rank]...)
	p := permutation{size: elemSize(x), run: 1, outer: rank, shape: shape, strides: strides}
	if rank > 0 && perm[rank-1] == rank-1 {
		p.run, p.outer = shape[rank-1], rank-1
	}
	// Runs copy alone: large tensors split by ranges of runs.
	runs := out.Len() / max(p.run, 1)
	if parts := min(parallelParts(out.Len()), runs); parts <= 1 {
		p.copyRuns(out.data, x.data, 0, runs)
	} else {
		q := p // the closure's copy, on the heap only when split
		parallelSplit(runs, parts, func(lo, hi int) { q.copyRuns(out.data, x.data, lo, hi) })
	}
	return out
}

// permutation is Permute's plan: output runs of run elements of size bytes,
// each at the input offset its index over the outer output axes gives.
type permutation struct {
	size, run, outer int
	shape, strides   [maxPermuteRank]int
}

// copyRuns copies output runs [lo, hi) from in to out.
func (p *permutation) copyRuns(out, in []byte, lo, hi int) {
	var idx [maxPermuteRank]int
	for i, r := p.outer-1, lo; i >= 0; i-- {
		idx[i], r = r%p.shape[i], r/p.shape[i]
	}
	size, run := p.size, p.run
	for o := lo * run; o < hi*run; o += run {
		src := 0
		for i, v := range idx[:p.outer] {
			src += v * p.strides[i]
		}
		copy(out[o*size:(o+run)*size], in[src*size:(src+run)*size])
		for i := p.outer - 1; i >= 0; i-- {
			if idx[i]++; idx[i] < p.shape[i] {
				break
			}
			idx[i] = 0
		}
	}
}

// maxPermuteRank is the most axes Permute reorders (its index arithmetic
// lives on the stack).
const maxPermuteRank = 8

// Narrow returns a copy of x restricted to [start, start+length) along its last axis.
func Narrow(x *Tensor, start, length int) *Tensor {
	c := x.Dim(-1)
	if start < 0 || length < 0 || start+length > c {
		panic(fmt.Sprintf("tensor: narrow [%d,%d) of axis of size %d", start, start+length, c))
	}
	var dims [8]int
	shape := append(append(dims[:0], x.shape[:len(x.shape)-1]...), length)
	if x.meta {
		return Meta(x.dtype, shape...)
	}
	out := empty(x.dtype, shape...)
	size := elemSize(x)
	for r := range x.Len() / c {
		copy(out.data[r*length*size:(r+1)*length*size], x.data[(r*c+start)*size:(r*c+start+length)*size])
	}
	return out
}

// Unnarrow is Narrow's adjoint: dy placed at [start, start+len) of a zero
// tensor whose last axis has size c.
func Unnarrow(dy *Tensor, start, c int) *Tensor {
	length := dy.Dim(-1)
	var dims [8]int
	out := New(dy.dtype, append(append(dims[:0], dy.shape[:len(dy.shape)-1]...), c)...)
	size := elemSize(dy)
	for r := range dy.Len() / length {
		copy(out.data[(r*c+start)*size:(r*c+start+length)*size], dy.data[r*length*size:(r+1)*length*size])
	}
	return out
}

// Embedding gathers rows of table [V, C] for each index: the result has
// shape append(grid, C), where grid is the shape of the indices
// ([len(idx)] when not given).
func Embedding(table *Tensor, idx []int, grid ...int) (*Tensor, error) {
	v, c := table.Dim(0), table.Dim(1)
	if len(grid) == 0 {
		grid = []int{len(idx)}
	}
	// A meta table's lookup reads no ids: nil ids stand for the grid's
	// worth (a plan's batch of shapes alone).
	if Numel(grid) != len(idx) && !(table.meta && idx == nil) {
		return nil, fmt.Errorf("tensor: %d embedding indices do not fill shape %v", len(idx), slices.Clone(grid)) // grid stays on the caller's stack
	}
	var dims [8]int
	shape := append(append(dims[:0], grid...), c)
	if table.meta {
		return Meta(table.dtype, shape...), nil
	}
	out := empty(table.dtype, shape...)
	size := elemSize(table)
	for i, id := range idx {
		if id < 0 || id >= v {
			Release(out)
			return nil, fmt.Errorf("tensor: embedding index %d at position %d is outside [0, %d)", id, i, v)
		}
		copy(out.data[i*c*size:(i+1)*c*size], table.data[id*c*size:(id+1)*c*size])
	}
	return out, nil
}

// EmbeddingBackward scatters dy [len(idx), C] into a [V, C] gradient of
// dtype dt, accumulating repeated indices in the compute type (float64 if
// dy or dt is F64) and rounding once, as ReduceBroadcast does.
func EmbeddingBackward(dy *Tensor, idx []int, v int, dt dtype.DType) *Tensor {
	out := New(dt, v, dy.Dim(-1))
	if dt == dtype.F64 || dy.dtype == dtype.F64 {
		scatterRows[float64](out, dy, idx)
	} else {
		scatterRows[float32](out, dy, idx)
	}
	return out
}

func scatterRows[T float](out, dy *Tensor, idx []int) {
	c := dy.Dim(-1)
	gs, acc := get[T](dy), scratch[T](out.Len())
	defer drop(dy, gs)
	defer release(acc)
	clear(acc)
	for i, id := range idx {
		for j, g := range gs[i*c : (i+1)*c] {
			acc[id*c+j] += g
		}
	}
	storeAs(out, acc)
}

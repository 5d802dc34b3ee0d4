package fp8

import (
	"fmt"
	"strings"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// Under FSDP a recipe that casts with scales computed at the cast
// (current, rowwise, MX and NVFP4 scaling) sends each converted Linear's
// weight as the codes of that cast, as Transformer Engine's FP8 and FP4
// tensors do: the ranks agree on the amax of every block of the weight
// (a rank's chunk may hold part of one), each casts its chunk with the
// scales of the agreed amaxes, and the codes are gathered and decoded to
// the values the Linear's GEMMs read. The weight is cast once for each
// distinct way its GEMMs read it: rowwise and MX scales follow the GEMM's
// reduction axis, so a forward's gather sends the cast along the rows and
// a backward's the cast down the columns (Transformer Engine's rowwise
// and columnwise data); per-tensor scales and square tiles serve both.

// tiling cuts a rows×cols matrix into tiles of tr×tc elements (the last
// ones shorter), each a block that shares a scale.
type tiling struct{ rows, cols, tr, tc int }

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func (t tiling) count() int { return ceilDiv(t.rows, t.tr) * ceilDiv(t.cols, t.tc) }

// runs calls fn for the elements at flat indices offset..offset+n-1, in
// order, as runs from..to-1 (counted from offset) that each lie in one
// tile of one row.
func (t tiling) runs(offset, n int, fn func(from, to, tile int)) {
	perRow := ceilDiv(t.cols, t.tc)
	for i := 0; i < n; {
		r, c := (offset+i)/t.cols, (offset+i)%t.cols
		to := min(n, i+min((c/t.tc+1)*t.tc, t.cols)-c)
		fn(i, to, r/t.tr*perRow+c/t.tc)
		i = to
	}
}

// weightCast is one cast of a weight: its tiles, each cast as scale says
// from the tile's amax and the whole weight's. finite leaves NaN out of a
// tile's amax (fp8-block's, as Transformer Engine's fmaxf does);
// tensorScaled makes the operand's scale the weight's amax/(448·6),
// NVFP4's tensor scale, which its tiles' scales divide out.
type weightCast struct {
	tiles        tiling
	scale        func(amax, tensorAmax float32) blockScale
	finite       bool
	tensorScaled bool
}

// amaxes folds into amax (one per tile) the largest |v| of each tile that
// vals, the weight's elements from offset on, holds part of.
func (w weightCast) amaxes(vals []float32, offset int, amax []float32) {
	of := amaxOf
	if w.finite {
		of = amaxFinite
	}
	w.tiles.runs(offset, len(vals), func(from, to, tile int) {
		amax[tile] = max(amax[tile], of(vals[from:to])) // max keeps a NaN
	})
}

// scales are the casts of tiles whose amaxes are amax, in a weight whose
// amax is tensorAmax.
func (w weightCast) scales(amax []float32, tensorAmax float32) []blockScale {
	out := make([]blockScale, len(amax))
	for t, a := range amax {
		out[t] = w.scale(a, tensorAmax)
	}
	return out
}

// cast returns the GEMM operand of the whole weight vals as w casts it:
// each element the value its code stands for.
func (w weightCast) cast(vals []float32) operand {
	amax := make([]float32, w.tiles.count())
	w.amaxes(vals, 0, amax)
	var tensorAmax float32
	if w.tensorScaled {
		tensorAmax = amaxOf(vals)
	}
	s := w.scales(amax, tensorAmax)
	out := make([]float32, len(vals))
	w.tiles.runs(0, len(vals), func(from, to, tile int) {
		for i, v := range vals[from:to] {
			out[from+i] = s[tile].cast(v)
		}
	})
	return w.operand(out, tensorAmax)
}

// operand is the GEMM operand of values, w's cast of a weight whose amax
// is tensorAmax.
func (w weightCast) operand(values []float32, tensorAmax float32) operand {
	op := operand{t: tensor.FromFloat32(values, w.tiles.rows, w.tiles.cols), scale: 1}
	if w.tensorScaled {
		op.scale = nvfp4TensorScale(tensorAmax)
	}
	return op
}

// A coder is a quantizer whose casts of a rows×cols weight of dtype in to
// dt can travel as codes: forward is the cast the forward GEMM reads
// (along the rows), backward the one the input gradient's reads (down the
// columns), nil if forward serves both. codes says the GEMMs multiply the
// codes with the cast's one scale (per-tensor scaling), not their values.
type coder interface {
	weightCasts(rows, cols int, in, dt dtype.DType) (forward weightCast, backward *weightCast, codes bool)
}

// weightCasts implements coder: one scale for the whole weight.
func (c currentScaling) weightCasts(rows, cols int, _, dt dtype.DType) (weightCast, *weightCast, bool) {
	return weightCast{tiles: tiling{rows, cols, rows, cols}, scale: func(amax, _ float32) blockScale {
		s := updateScale(amax, 1, float32(dt.Max()), 0)
		return blockScale{enc: s, dec: 1 / s, round: dt.RoundSat}
	}}, nil, true
}

// weightCasts implements coder: a scale per row, and per column (the
// whole weight's for rowwise_with_gw_hp).
func (a axiswise) weightCasts(rows, cols int, _, dt dtype.DType) (weightCast, *weightCast, bool) {
	line := func(amax, _ float32) blockScale { return lineScale(amax, dt) }
	back := weightCast{tiles: tiling{rows, cols, rows, 1}, scale: line}
	if a.highPrecisionWeightGrad {
		back.tiles.tc = cols
	}
	return weightCast{tiles: tiling{rows, cols, 1, cols}, scale: line}, &back, false
}

// weightCasts implements coder: blocks of BlockSize along the rows, and
// down the columns.
func (b blockScaling) weightCasts(rows, cols int, _, dt dtype.DType) (weightCast, *weightCast, bool) {
	block := func(amax, _ float32) blockScale { return b.scale(amax, dt) }
	back := weightCast{tiles: tiling{rows, cols, min(BlockSize, rows), 1}, scale: block}
	return weightCast{tiles: tiling{rows, cols, 1, min(BlockSize, cols)}, scale: block}, &back, false
}

// weightCasts implements coder: square tiles, which serve both GEMMs.
func (nvfp4Scaling) weightCasts(rows, cols int, _, _ dtype.DType) (weightCast, *weightCast, bool) {
	return weightCast{tiles: tiling{rows, cols, NVFP4Block, NVFP4Block}, scale: nvfp4Scale, tensorScaled: true}, nil, false
}

// weightCasts implements coder: square tiles, which serve both GEMMs.
func (b blockwise) weightCasts(rows, cols int, in, dt dtype.DType) (weightCast, *weightCast, bool) {
	tile := func(amax, _ float32) blockScale { return b.scale(amax, in, dt) }
	return weightCast{tiles: tiling{rows, cols, BlockTile, BlockTile}, scale: tile, finite: true}, nil, false
}

// codedLinears are a recipe's converted Linears, by module path, whose
// weights FSDP may gather as codes (the precision.GatherCoder role).
type codedLinears struct{ linears map[string]*linear }

// install makes g the GEMM of l, the Linear at path.
func (c *codedLinears) install(path string, l *nn.Linear, g *linear) {
	g.weight, l.GEMM = l.Weight, g
	if c.linears == nil {
		c.linears = map[string]*linear{}
	}
	c.linears[path] = g
}

// GatherCodec returns the codec of the weight param of a converted
// Linear, for the forward's GEMM, the backward's or both; nil for any
// other parameter.
func (c *codedLinears) GatherCodec(param string, forward, backward bool) comm.Codec {
	l := c.weightOf(param)
	if l == nil {
		return nil
	}
	cd, ok := l.q.(coder)
	if !ok {
		return nil
	}
	w := l.weight.Value
	rows, cols := w.Dim(0), w.Dim(1)
	fwd, back, codes := cd.weightCasts(rows, cols, w.DType(), l.format.Forward)
	k := &codec{into: l, dt: l.format.Forward, rows: rows, cols: cols, codes: codes}
	switch {
	case back == nil:
		k.casts, k.axes = []weightCast{fwd}, [][]int{{0, 1}}
	case forward && backward:
		k.casts, k.axes = []weightCast{fwd, *back}, [][]int{{1}, {0}}
	case backward:
		k.casts, k.axes = []weightCast{*back}, [][]int{{0}}
	default:
		k.casts, k.axes = []weightCast{fwd}, [][]int{{1}}
	}
	return k
}

// DropCoded frees the decoded weight of param's Linear.
func (c *codedLinears) DropCoded(param string) {
	if l := c.weightOf(param); l != nil && l.coded != nil {
		l.coded.drop()
		l.coded = nil
	}
}

func (c *codedLinears) weightOf(param string) *linear {
	module, ok := strings.CutSuffix(param, ".weight")
	if !ok {
		return nil
	}
	return c.linears[module]
}

// codec is the comm.Codec of one Linear's weight.
type codec struct {
	into       *linear
	dt         dtype.DType
	rows, cols int
	casts      []weightCast
	axes       [][]int // the GEMM axes (quantized.along's) each cast serves
	codes      bool    // the GEMMs multiply codes (see coder)
}

func (k *codec) DType() dtype.DType { return k.dt }
func (k *codec) Parts() int         { return len(k.casts) }

// Amaxes are the whole weight's amax, then each cast's tiles'.
func (k *codec) Amaxes(chunk *tensor.Tensor, offset int) []float32 {
	n := 1
	for _, c := range k.casts {
		n += c.tiles.count()
	}
	amax := make([]float32, n)
	vals := chunk.Float32s()[:k.held(offset, chunk.Len())]
	amax[0] = amaxOf(vals)
	base := 1
	for _, c := range k.casts {
		c.amaxes(vals, offset, amax[base:base+c.tiles.count()])
		base += c.tiles.count()
	}
	return amax
}

// held is how many of a chunk of n elements from offset are the weight's.
func (k *codec) held(offset, n int) int { return max(0, min(n, k.rows*k.cols-offset)) }

// scales are each cast's tiles' casts from the agreed amaxes.
func (k *codec) scales(amax []float32) [][]blockScale {
	out := make([][]blockScale, len(k.casts))
	base := 1
	for j, c := range k.casts {
		out[j] = c.scales(amax[base:base+c.tiles.count()], amax[0])
		base += len(out[j])
	}
	return out
}

func (k *codec) Encode(chunk *tensor.Tensor, offset int, amax []float32) []*tensor.Tensor {
	vals := chunk.Float32s()
	held := k.held(offset, len(vals))
	parts := make([]*tensor.Tensor, len(k.casts))
	for j, s := range k.scales(amax) {
		codes := make([]float32, len(vals)) // the padding's are 0
		k.casts[j].tiles.runs(offset, held, func(from, to, tile int) {
			if b := s[tile]; b.dec == b.dec { // a NaN block decodes to NaN whatever its codes
				for i, v := range vals[from:to] {
					codes[from+i] = b.code(v)
				}
			}
		})
		parts[j] = cast(tensor.FromFloat32(codes, len(codes)), k.dt)
	}
	return parts
}

func (k *codec) Use(parts []*tensor.Tensor, amax []float32) {
	n := k.rows * k.cols
	var c coded
	for j, s := range k.scales(amax) {
		vals := parts[j].Float32s()[:n]
		var op operand
		if k.codes {
			op = operand{t: cast(tensor.FromFloat32(vals, k.rows, k.cols), k.dt), scale: s[0].dec}
		} else {
			k.casts[j].tiles.runs(0, n, func(from, to, tile int) {
				for i := from; i < to; i++ {
					vals[i] *= s[tile].dec
				}
			})
			op = k.casts[j].operand(vals, amax[0])
			op.t = op.t.Clone() // into the pool, which counts it
		}
		for _, axis := range k.axes[j] {
			c.operands[axis] = &op
		}
	}
	k.into.coded = &c
}

// coded is a weight as FSDP gathered it: its operand for the GEMMs along
// each axis (see quantized.along).
type coded struct{ operands [2]*operand }

func (c *coded) along(axis int) operand {
	op := c.operands[axis]
	if op == nil {
		panic(fmt.Sprintf("fp8: the weight was gathered for the GEMMs of another pass, not those along axis %d", axis))
	}
	return *op
}

// free implements quantized: the operands are c's until DropCoded.
func (*coded) free() {}

func (c *coded) drop() {
	for i, op := range c.operands {
		if op != nil && (i == 0 || c.operands[0] != op) {
			tensor.Free(op.t)
		}
	}
}

// cast returns t, a temporary, cast to dt.
func cast(t *tensor.Tensor, dt dtype.DType) *tensor.Tensor {
	defer tensor.Free(t)
	return t.To(dt)
}

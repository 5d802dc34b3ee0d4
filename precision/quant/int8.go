package quant

import (
	"math"
	"slices"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// DefaultThreshold is LLM.int8()'s outlier threshold: input features with
// any |x| at or above it are computed in the compute dtype, not in int8.
const DefaultThreshold = 6

// RowWise is a matrix quantized to int8 one row at a time, LLM.int8()'s
// vector-wise quantization (Dettmers et al. 2022): element (i, j) is
// stored as round(x·(127/Absmax[i])) and decodes to
// Codes[i,j]·Absmax[i]·(1/127).
type RowWise struct {
	Codes  *tensor.Tensor // int8 [rows, cols]
	Absmax []float32      // [rows]
}

// QuantizeRows quantizes the rows of the matrix t to int8, rounding to
// nearest even, as bitsandbytes' int8_vectorwise_quant does. With
// threshold > 0, an element with |x| ≥ threshold is an outlier: it is left
// out of its row's absmax, and every column holding one is zeroed in Codes
// and listed in outliers, in order, for the caller to compute in higher
// precision (the mixed-precision decomposition). A row of zeros gets
// absmax 0 and codes 0.
func QuantizeRows(t *tensor.Tensor, threshold float32) (q *RowWise, outliers []int) {
	rows, cols := t.Dim(0), t.Dim(1)
	codes := tensor.NewLike(t, dtype.I8, rows, cols)
	absmax := make([]float32, rows)
	if t.IsMeta() { // a plan's: meta codes, and zero absmaxes of the real size
		return &RowWise{Codes: codes, Absmax: absmax}, nil
	}
	vals := t.Float32s()
	outlier := make([]bool, cols)
	for i, v := range vals {
		if a := abs(v); threshold > 0 && a >= threshold {
			outlier[i%cols] = true
		} else {
			absmax[i/cols] = max(absmax[i/cols], a)
		}
	}
	data := codes.Data()
	for r, m := range absmax {
		if m == 0 {
			continue
		}
		scale := 127 / m
		for c, v := range vals[r*cols : (r+1)*cols] {
			if !outlier[c] {
				data[r*cols+c] = byte(int8(math.RoundToEven(float64(v * scale))))
			}
		}
	}
	for c, o := range outlier {
		if o {
			outliers = append(outliers, c)
		}
	}
	return &RowWise{Codes: codes, Absmax: absmax}, outliers
}

// inv127 is float32(1/127), bitsandbytes' int8 dequantization factor.
const inv127 float32 = 1.0 / 127

// mmDequant is MM_DEQUANT_CONST of bitsandbytes' CUDA kernels, 1/127²
// to 7 digits. (Its Python fallback for other devices multiplies by
// 6.200124e-05 instead, 1.8e-5 too large.)
const mmDequant float32 = 6.200012e-05

// Dequantize returns the matrix q stands for in dt:
// (code·absmax)·(1/127) in float32, rounded once to dt.
func (q *RowWise) Dequantize(dt dtype.DType) *tensor.Tensor {
	if q.Codes.IsMeta() { // a plan's pass
		return tensor.Meta(dt, q.Codes.Shape()...)
	}
	cols := q.Codes.Dim(1)
	vals := q.Codes.Float32s()
	for i := range vals {
		vals[i] = vals[i] * q.Absmax[i/cols] * inv127
	}
	return convert(tensor.FromFloat32(vals, q.Codes.Shape()...), dt)
}

// Free returns the codes of a temporary quantization to the pool.
func (q *RowWise) Free() { tensor.Free(q.Codes) }

// convert returns t, a temporary, in dt, freeing t if that made a copy.
func convert(t *tensor.Tensor, dt dtype.DType) *tensor.Tensor {
	c := t.To(dt)
	if c != t {
		tensor.Free(t)
	}
	return c
}

// Bytes returns the memory q holds: one byte an element and a float32 a row.
func (q *RowWise) Bytes() int { return q.Codes.Bytes() + 4*len(q.Absmax) }

// Shape returns the shape of the matrix q stands for.
func (q *RowWise) Shape() []int { return q.Codes.Shape() }

// Format is "int8".
func (q *RowWise) Format() string { return "int8" }

// matmulInt8 returns a·bᵀ for int8 matrices a [m, k] and b [n, k],
// dequantized as bitsandbytes' int8_mm_dequant does: the exact integer
// dot product (an int8 tensor core's int32 sum) in float32, times
// a.Absmax[i]·b.Absmax[j], times 1/127² (tensor.Int8MatMulT's exact
// sums).
func matmulInt8(a, b *RowWise) []float32 {
	prod := tensor.Int8MatMulT(a.Codes, b.Codes)
	sums := prod.Float64s()
	tensor.Free(prod)
	n := len(b.Absmax)
	out := make([]float32, len(sums))
	for i, s := range sums {
		out[i] = float32(s) * (a.Absmax[i/n] * b.Absmax[i%n]) * mmDequant
	}
	return out
}

// mixedLinear returns x·wᵀ + bias in x's dtype the LLM.int8() way
// (bitsandbytes' int8_mixed_scaled_mm): x [m, in] is quantized row-wise
// with the outlier threshold and multiplied by w in int8, the bias added
// and the result rounded to x's dtype; then the outlier columns of x,
// in x's dtype, times the same columns of w dequantized, are added as one
// addmm (accumulated in float32 with the int8 result, rounded once). It
// also returns the outlier columns.
func mixedLinear(x *tensor.Tensor, w *RowWise, bias *tensor.Tensor, threshold float32) (*tensor.Tensor, []int) {
	dt := x.DType()
	if x.IsMeta() || w.Codes.IsMeta() { // a plan's pass: the shape alone
		return tensor.Meta(dt, x.Dim(0), w.Codes.Dim(0)), nil
	}
	qx, outliers := QuantizeRows(x, threshold)
	y := matmulInt8(qx, w)
	qx.Free()
	if bias != nil {
		b := bias.Float32s()
		for i := range y {
			y[i] += b[i%len(b)]
		}
	}
	out := convert(tensor.FromFloat32(y, x.Dim(0), len(w.Absmax)), dt)
	if len(outliers) == 0 {
		return out, nil
	}
	wide := tensor.Promote(dt, dtype.F32)
	deq := w.Dequantize(dt)
	xo, wo := convert(columns(x, outliers), wide), convert(columns(deq, outliers), wide)
	sub := tensor.MatMul(xo, wo, false, true)
	out = convert(out, wide)
	sum := tensor.Add(out, sub)
	for _, t := range []*tensor.Tensor{deq, xo, wo, sub, out} {
		tensor.Free(t)
	}
	return convert(sum, dt), outliers
}

// weightGradInt8 returns dyᵀ·x, the weight gradient of int8 training
// (bitsandbytes' MatMul8bitLt with trainable weights): dy and x, with the
// outlier columns of x zeroed, are quantized column by column (per output
// and per input feature, over the batch) and multiplied in int8; the
// outlier columns of x are multiplied in their dtype and added, in float32.
func weightGradInt8(dy, x *tensor.Tensor, outliers []int) *tensor.Tensor {
	dyT := tensor.Permute(dy, 1, 0)
	qdy, _ := QuantizeRows(dyT, 0)
	zeroed := zeroColumns(x, outliers)
	xT := tensor.Permute(zeroed, 1, 0)
	qx, _ := QuantizeRows(xT, 0)
	out, in := dy.Dim(1), x.Dim(1)
	dw := tensor.FromFloat32(matmulInt8(qdy, qx), out, in)
	qdy.Free()
	qx.Free()
	tensor.Free(dyT)
	tensor.Free(xT)
	if zeroed != x {
		tensor.Free(zeroed)
	}
	if len(outliers) == 0 {
		return dw
	}
	wide := tensor.Promote(x.DType(), dtype.F32)
	dyw, xo := dy.To(wide), convert(columns(x, outliers), wide)
	prod := tensor.MatMul(dyw, xo, true, false) // (out, len(outliers))
	sub := prod.Float64s()
	tensor.Free(prod)
	tensor.Free(xo)
	if dyw != dy {
		tensor.Free(dyw)
	}
	vals := dw.Float64s()
	tensor.Free(dw)
	for o := range out {
		for k, c := range outliers {
			vals[o*in+c] += sub[o*len(outliers)+k]
		}
	}
	return convert(tensor.FromFloat64(vals, out, in), wide)
}

// columns returns the listed columns of the matrix t, in t's dtype.
func columns(t *tensor.Tensor, cols []int) *tensor.Tensor {
	rows, n := t.Dim(0), t.Dim(1)
	vals := t.Float64s()
	out := make([]float64, 0, rows*len(cols))
	for r := range rows {
		for _, c := range cols {
			out = append(out, vals[r*n+c])
		}
	}
	return convert(tensor.FromFloat64(out, rows, len(cols)), t.DType())
}

// zeroColumns returns a copy of the matrix t with the listed columns zeroed.
func zeroColumns(t *tensor.Tensor, cols []int) *tensor.Tensor {
	if len(cols) == 0 {
		return t
	}
	n := t.Dim(1)
	vals := t.Float64s()
	for i := range vals {
		if _, ok := slices.BinarySearch(cols, i%n); ok {
			vals[i] = 0
		}
	}
	return convert(tensor.FromFloat64(vals, t.Shape()...), t.DType())
}

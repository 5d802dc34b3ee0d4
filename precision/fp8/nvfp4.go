package fp8

import (
	"math"
	"math/bits"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision/internal/declined"
	"github.com/weftml/weft/tensor"
)

// NVFP4 is the "nvfp4" plugin: Transformer Engine's NVFP4BlockScaling as
// its reference quantizer (custom_recipes/quantization_nvfp4.py) defines
// it. Every GEMM operand is cast to E2M1 in blocks of 16 along the GEMM's
// reduction axis, each block with an E4M3 scale, under one float32 scale
// for the whole tensor from its amax (448·6/amax); weights in 16×16 tiles,
// which serve the forward and the input gradient's GEMM alike; and the
// weight gradient's operands (input and output gradient, reduced over the
// batch) pass first through a random Hadamard transform of each 16
// consecutive rows, which cancels in their product and spreads outliers
// before the cast. Transformer Engine also rounds the output gradient
// stochastically; this recipe rounds to nearest. A tensor's global scale
// and its blocks come from what a rank holds, as for Rowwise.
type NVFP4 struct {
	Filter   Filter // nil: DefaultFilter
	declines declined.Log
	codedLinears
}

// NVFP4Block is the elements along a GEMM's reduction axis, and the side
// of a weight's tile, that share one E4M3 scale.
const NVFP4Block = 16

func NewNVFP4() *NVFP4 { return &NVFP4{} }

func (*NVFP4) Name() string { return "nvfp4" }

// Declined says why ConvertModule left the Linear at path as it was (the
// precision.ConversionReporter role).
func (p *NVFP4) Declined(path string) (string, bool) { return p.declines.Why(path) }

// ConvertModule gives m NVFP4 GEMMs if it is an eligible Linear.
func (p *NVFP4) ConvertModule(path string, m nn.Module) error {
	l, why, err := eligible(m, FP4, p.Filter, p)
	if l != nil {
		if err := blocksWithinShares(p.Name(), l, NVFP4Block, "NVFP4"); err != nil {
			return err
		}
		p.codedLinears.install(path, l, &linear{owner: p, format: FP4, q: nvfp4Scaling{}})
	}
	p.declines.Note(path, why)
	return err
}

// nvfp4Scaling is NVFP4's quantizer.
type nvfp4Scaling struct{}

func (nvfp4Scaling) quantize(r role, t *tensor.Tensor, _ dtype.DType, _ pass) quantized {
	if t.IsMeta() { // a plan's pass: the float32 values a GEMM reads, on shapes alone
		return operand{t: tensor.Meta(dtype.F32, t.Shape()...), scale: 1}
	}
	return nvfp4Matrix{vals: t.Float32s(), rows: t.Dim(0), cols: t.Dim(1), dt: t.DType(), role: r}
}

// nvfp4Matrix is a matrix to be cast to NVFP4 for the GEMMs that read it.
type nvfp4Matrix struct {
	vals       []float32 // row-major
	rows, cols int
	dt         dtype.DType // the matrix's, which the Hadamard transform's result takes
	role       role
}

// along casts the matrix for a GEMM that reduces along axis: the values
// of the E2M1 codes times their E4M3 block scales, with the tensor's
// amax/(448·6) as the operand's scale. A weight's square tiles serve both
// of its GEMMs as they are.
func (m nvfp4Matrix) along(axis int) operand {
	if m.role == roleW {
		out, scale := nvfp4Cast(m.vals, m.rows, m.cols, NVFP4Block)
		return operand{t: tensor.FromFloat32(out, m.rows, m.cols), scale: scale}
	}
	if axis == 1 {
		out, scale := nvfp4Cast(m.vals, m.rows, m.cols, 1)
		return operand{t: tensor.FromFloat32(out, m.rows, m.cols), scale: scale}
	}
	// The weight gradient's operands, reduced down their columns: cast the
	// transpose along its rows after the Hadamard transform.
	vals := transpose(m.vals, m.rows, m.cols)
	hadamard16(vals, m.cols, m.rows)
	if m.dt != dtype.F32 {
		dtype.RoundFloat32s(m.dt, vals)
	}
	out, scale := nvfp4Cast(vals, m.cols, m.rows, 1)
	return operand{t: tensor.FromFloat32(transpose(out, m.cols, m.rows), m.rows, m.cols), scale: scale}
}

func (nvfp4Matrix) free() {}

// transpose returns the rows×cols matrix vals transposed.
func transpose(vals []float32, rows, cols int) []float32 {
	out := make([]float32, len(vals))
	for r := range rows {
		for c := range cols {
			out[c*rows+r] = vals[r*cols+c]
		}
	}
	return out
}

// hadamard is S·H/4, H the 16×16 Sylvester Hadamard matrix and S the
// diagonal of Transformer Engine's fixed signs (get_wgrad_sign_vector):
// the random Hadamard transform, orthogonal.
var hadamard = func() (t [NVFP4Block][NVFP4Block]float64) {
	signs := [NVFP4Block]float64{1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1}
	for k := range NVFP4Block {
		for i := range NVFP4Block {
			t[k][i] = 0.25 * signs[k]
			if bits.OnesCount(uint(k&i))%2 == 1 {
				t[k][i] = -t[k][i]
			}
		}
	}
	return t
}()

// hadamard16 replaces, in each row of vals (rows×cols), every whole block
// of 16 consecutive elements x by x·hadamard, summed in float64 in order
// of k and rounded once to float32 (the caller rounds it to the matrix's
// dtype, in which Transformer Engine computes it). A last block shorter
// than 16 is left as it is (Transformer Engine requires whole ones).
func hadamard16(vals []float32, rows, cols int) {
	for r := range rows {
		line := vals[r*cols : (r+1)*cols]
		for b := 0; b+NVFP4Block <= cols; b += NVFP4Block {
			var x [NVFP4Block]float32
			copy(x[:], line[b:b+NVFP4Block])
			for i := range NVFP4Block {
				s := 0.0
				for k := range NVFP4Block {
					s += float64(x[k]) * hadamard[k][i]
				}
				line[b+i] = float32(s)
			}
		}
	}
}

// nvfp4Cast casts vals (rows×cols) as Transformer Engine's reference
// quantizer does, in blocks of 16 along each row, or in tile×tile tiles
// when tile is 16, and returns each element as its E2M1 code's value times
// its block's E4M3 decode scale, and the tensor's amax/2688 that
// multiplies the products back. In float32, as the reference computes:
// the global encode scale g = 2688/amax (float32's largest for amax 0,
// 1 for inf amax); a block's decode scale d = e4m3(min(max|block|·(g·(1/6)),
// 448)); its encode scale 1/(d·(1/g)); each element clamped to ±6 after
// the encode scale and cast by the reference's thresholds (to nearest,
// ties to even; NaN and -0 to +0).
func nvfp4Cast(vals []float32, rows, cols, tile int) ([]float32, float32) {
	amax := amaxOf(vals)
	out := make([]float32, len(vals))
	for r0 := 0; r0 < rows; r0 += tile {
		r1 := min(r0+tile, rows)
		for c0 := 0; c0 < cols; c0 += NVFP4Block {
			c1 := min(c0+NVFP4Block, cols)
			s := nvfp4Scale(blockAmax(vals, cols, r0, r1, c0, c1), amax)
			for r := r0; r < r1; r++ {
				for c := c0; c < c1; c++ {
					out[r*cols+c] = s.cast(vals[r*cols+c])
				}
			}
		}
	}
	return out, amax / (448 * 6)
}

// nvfp4Scale is the cast of a block of amax in a tensor of tensorAmax
// (see nvfp4Cast).
func nvfp4Scale(amax, tensorAmax float32) blockScale {
	global := float32(448*6) / tensorAmax
	switch {
	case global > math.MaxFloat32:
		global = math.MaxFloat32
	case global == 0:
		global = 1
	}
	decodeGlobal := 1 / global
	d := min(amax*(global*float32(1.0/6)), math.MaxFloat32)
	d = dtype.E4M3FN.Round(max(min(d, 448), -448))
	return blockScale{enc: min(1/(d*decodeGlobal), math.MaxFloat32), dec: d, round: e2m1Reference}
}

// blockAmax is the largest |v| of vals (a matrix of cols columns) in rows
// r0..r1 and columns c0..c1, NaN if one is NaN.
func blockAmax(vals []float32, cols, r0, r1, c0, c1 int) float32 {
	m := float32(0)
	for r := r0; r < r1; r++ {
		a := amaxOf(vals[r*cols+c0 : r*cols+c1])
		if a != a {
			return a
		}
		m = max(m, a)
	}
	return m
}

// e2m1Reference is Transformer Engine's reference cast to E2M1
// (cast_to_fp4x2 after clamping to ±6): to nearest, ties to even, by
// thresholds, which send NaN and -0 to +0.
func e2m1Reference(x float32) float32 {
	x = max(min(x, 6), -6) // NaN stays NaN
	a, neg := x, x < 0
	if neg {
		a = -x
	}
	var v float32
	switch {
	case !(a > 0.25) && !neg: // 0, -0, NaN and up to 0.25
		return 0
	case a <= 0.25:
		v = 0
	case a < 0.75:
		v = 0.5
	case a <= 1.25:
		v = 1
	case a < 1.75:
		v = 1.5
	case a <= 2.5:
		v = 2
	case a < 3.5:
		v = 3
	case a <= 5:
		v = 4
	default:
		v = 6
	}
	if neg {
		return -v
	}
	return v
}

package fp8

import (
	"math"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision/internal/declined"
	"github.com/weftml/weft/tensor"
)

// Rowwise is torchao's rowwise recipe, the "fp8-rowwise" plugin
// (Float8LinearRecipeName.ROWWISE): every operand of a Linear's three
// GEMMs is cast to E4M3 with one scale per row along the GEMM's reduction
// axis (ScalingGranularity.AXISWISE), a power of two
// (round_scales_to_power_of_2), computed afresh at each cast. With
// HighPrecisionWeightGrad it is "fp8-rowwise-gw-hp" (ROWWISE_WITH_GW_HP):
// the input gradient's GEMM takes the weight with one scale for the whole
// tensor, and the weight gradient's GEMM multiplies the input and output
// gradient as they are, in float32.
//
// A line's scale comes from the values a rank holds: a tensor-parallel
// share of a weight, or a data-parallel rank's rows of the batch for the
// weight gradient's GEMM, are scaled on their own, as torchao does on
// each GPU.
type Rowwise struct {
	HighPrecisionWeightGrad bool
	Filter                  Filter // nil: DefaultFilter
	declines                declined.Log
	codedLinears
}

// NewRowwise returns torchao's rowwise recipe; with highPrecisionWeightGrad
// its rowwise_with_gw_hp variant.
func NewRowwise(highPrecisionWeightGrad bool) *Rowwise {
	return &Rowwise{HighPrecisionWeightGrad: highPrecisionWeightGrad}
}

func (p *Rowwise) Name() string {
	if p.HighPrecisionWeightGrad {
		return "fp8-rowwise-gw-hp"
	}
	return "fp8-rowwise"
}

// Declined says why ConvertModule left the Linear at path as it was (the
// precision.ConversionReporter role).
func (p *Rowwise) Declined(path string) (string, bool) { return p.declines.Why(path) }

// ConvertModule gives m FP8 GEMMs if it is an eligible Linear.
func (p *Rowwise) ConvertModule(path string, m nn.Module) error {
	l, why, err := eligible(m, E4M3, p.Filter, p)
	if l != nil {
		p.codedLinears.install(path, l, &linear{owner: p, format: E4M3, q: axiswise{highPrecisionWeightGrad: p.HighPrecisionWeightGrad}})
	}
	p.declines.Note(path, why)
	return err
}

// axiswise is Rowwise's quantizer.
type axiswise struct{ highPrecisionWeightGrad bool }

func (a axiswise) quantize(r role, t *tensor.Tensor, dt dtype.DType, _ pass) quantized {
	if t.IsMeta() { // a plan's pass: the float32 values a GEMM reads, on shapes alone
		return operand{t: tensor.Meta(dtype.F32, t.Shape()...), scale: 1}
	}
	b := blocks{vals: t.Float32s(), rows: t.Dim(0), cols: t.Dim(1), dt: dt, scale: lineScale}
	if !a.highPrecisionWeightGrad {
		return b
	}
	return gradWeightInHighPrecision{blocks: b, role: r}
}

// gradWeightInHighPrecision is a matrix of rowwise_with_gw_hp: read down
// its columns (axis 0), the input and the output gradient are the weight
// gradient's operands, which it leaves as they are, and the weight is the
// input gradient's, which it casts with one scale.
type gradWeightInHighPrecision struct {
	blocks
	role role
}

func (g gradWeightInHighPrecision) along(axis int) operand {
	switch {
	case axis == 1:
		return g.blocks.along(1)
	case g.role == roleW:
		whole := g.blocks
		whole.rows, whole.cols = 1, len(whole.vals)
		o := whole.along(1)
		o.t.SetShape(g.rows, g.cols)
		return o
	}
	return operand{t: tensor.FromFloat32(g.vals, g.rows, g.cols), scale: 1}
}

// lineScale is torchao's axiswise cast of a line of amax: the scale s =
// 448/max(amax, 1e-12) (for E4M3, in float64, then float32) rounded down
// to a power of two as torch rounds it, exp2(floor(log2(s))) in float32,
// and each element q/s for q = sat(v·s) cast to dt. A line holding inf or
// NaN becomes NaN, as the scaled GEMM's product with 1/s does.
func lineScale(amax float32, dt dtype.DType) blockScale {
	s := float32(dt.Max() / max(float64(amax), 1e-12)) // max keeps a NaN amax
	s = float32(math.Exp2(math.Floor(float64(float32(math.Log2(float64(s)))))))
	return blockScale{enc: s, dec: 1 / s, round: dt.RoundSat}
}

package fp8

import (
	"fmt"
	"math"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision/internal/declined"
	"github.com/weftml/weft/tensor"
)

// MX is the "fp8-mx" plugin: MXFP8 (Transformer Engine's
// MXFP8BlockScaling, the OCP microscaling format). Every block of
// BlockSize consecutive elements along a GEMM's reduction axis shares a
// power-of-two scale, an E8M0 value, so an outlier costs precision only in
// its own block, and nothing is carried from step to step.
type MX struct {
	Format   Format // E4M3, Transformer Engine's default for MXFP8
	Filter   Filter // nil: DefaultFilter
	declines declined.Log
	codedLinears
}

// BlockSize is the number of elements that share one MX scale.
const BlockSize = 32

// NewMX returns the recipe with Transformer Engine's defaults.
func NewMX() *MX { return &MX{Format: E4M3} }

func (*MX) Name() string { return "fp8-mx" }

// Declined says why ConvertModule left the Linear at path as it was (the
// precision.ConversionReporter role).
func (p *MX) Declined(path string) (string, bool) { return p.declines.Why(path) }

// ConvertModule gives m FP8 GEMMs if it is an eligible Linear. A
// tensor-parallel Linear whose shares would cut a block (a share boundary
// along either axis of the weight that is not a multiple of BlockSize) is
// an error: its ranks' blocks would not be one device's.
func (p *MX) ConvertModule(path string, m nn.Module) error {
	l, why, err := eligible(m, p.Format, p.Filter, p)
	if l != nil {
		if err := blocksWithinShares(p.Name(), l, BlockSize, "MX"); err != nil {
			return err
		}
		p.codedLinears.install(path, l, &linear{owner: p, format: p.Format, q: blockScaling{scale: mxScale}})
	}
	p.declines.Note(path, why)
	return err
}

// blocksWithinShares checks that every tensor-parallel share of l's
// weight begins on a boundary of plugin's blocks of block elements (kind
// names them: "MX") along both axes, which the blocks run along (the
// forward GEMM's reduction over the input features, the input gradient's
// over the output features), and so along the activations and gradients
// split with them.
func blocksWithinShares(plugin string, l *nn.Linear, block int, kind string) error {
	s, ok := l.Split.(nn.ShardedSplit)
	if !ok {
		return nil
	}
	for axis, features := range [2]string{"output", "input"} {
		if stride := s.ShareStride(axis); stride%block != 0 {
			return fmt.Errorf("%s: the Linear's tensor-parallel shares begin every %d %s features, which cuts %d-element %s blocks across ranks; use fewer ranks or a width whose shares are multiples of %d", plugin, stride, features, block, kind, block)
		}
	}
	return nil
}

// blockScaling is the quantizer of MX and MXFP4: blocks of BlockSize
// elements along each GEMM's reduction axis, each cast with scale.
type blockScaling struct{ scale scaler }

func (b blockScaling) quantize(_ role, t *tensor.Tensor, dt dtype.DType, _ pass) quantized {
	if t.IsMeta() { // a plan's pass: the float32 values a GEMM reads, on shapes alone
		return operand{t: tensor.Meta(dtype.F32, t.Shape()...), scale: 1}
	}
	return blocks{vals: t.Float32s(), rows: t.Dim(0), cols: t.Dim(1), dt: dt, size: BlockSize, scale: b.scale}
}

// blocks is a matrix to be cast in blocks that each share a scale. The
// blocks follow each GEMM's reduction axis, so a matrix read along its rows
// by one GEMM and down its columns by another is cast twice, as MXFP8 and
// rowwise-scaled hardware GEMMs need.
type blocks struct {
	vals       []float32 // row-major
	rows, cols int
	dt         dtype.DType
	size       int    // elements of a block along a line; 0: the whole line
	scale      scaler // how a block is cast
	// amax is a block's amax, from which scale casts it; nil: amaxOf
	// (NaN if the block holds one).
	amax func([]float32) float32
}

// blockScale is how the elements of one block are cast: v becomes the
// code round(v·enc), a value of the format, which stands for code·dec.
type blockScale struct {
	enc, dec float32
	round    func(float32) float32
}

func (s blockScale) code(v float32) float32 { return s.round(v * s.enc) }

// cast is the value v's code stands for.
func (s blockScale) cast(v float32) float32 { return s.code(v) * s.dec }

// A scaler is a recipe's cast of a block of amax to dt.
type scaler func(amax float32, dt dtype.DType) blockScale

// castBlock replaces blk by the values its cast s holds.
func castBlock(blk []float32, s blockScale) {
	for i, v := range blk {
		blk[i] = s.cast(v)
	}
}

// along casts the blocks along axis and returns their values in float32:
// a float32 GEMM over them accumulates the products the scaled FP8 GEMM
// does, since every scale is a power of two.
func (b blocks) along(axis int) operand {
	lines, length, lineStride, step := b.rows, b.cols, b.cols, 1
	if axis == 0 {
		lines, length, lineStride, step = b.cols, b.rows, 1, b.cols
	}
	size := length
	if b.size > 0 {
		size = min(b.size, length)
	}
	amax := amaxOf
	if b.amax != nil {
		amax = b.amax
	}
	out := make([]float32, len(b.vals))
	blk := make([]float32, size)
	for l := range lines {
		for start := 0; start < length; start += size {
			n := min(size, length-start)
			for i := range n {
				blk[i] = b.vals[l*lineStride+(start+i)*step]
			}
			castBlock(blk[:n], b.scale(amax(blk[:n]), b.dt))
			for i := range n {
				out[l*lineStride+(start+i)*step] = blk[i]
			}
		}
	}
	return operand{t: tensor.FromFloat32(out, b.rows, b.cols), scale: 1}
}

// free implements quantized: the blocks are cast afresh for each GEMM, and
// the garbage collector takes them.
func (blocks) free() {}

// mxScale is MXFP8's cast of a block of amax: the shared scale is 2^e
// with e = floor(log2(amax)) - emax(dt) (8 for E4M3, 15 for E5M2),
// clamped to E8M0's 2^-127..2^127, and each element is v/2^e cast to dt
// with saturation (both powers of two are float32s, so multiplying by
// them rounds as scaling does).
func mxScale(amax float32, dt dtype.DType) blockScale {
	e := math.Ilogb(float64(amax)) - math.Ilogb(dt.Max()) // Ilogb(0) is very negative, of inf and NaN very positive
	e = min(max(e, -127), 127)
	return blockScale{enc: float32(math.Ldexp(1, -e)), dec: float32(math.Ldexp(1, e)), round: dt.RoundSat}
}

// MXFP4 is the "mxfp4" plugin: torchao's MX training recipe with
// elem_dtype float4_e2m1fn_x2 (MXLinearConfig, emulated): the operands of
// a Linear's three GEMMs in E2M1 blocks of BlockSize along each GEMM's
// reduction axis, each with a power-of-two scale as torchao's to_mx
// computes it (ScaleCalculationMode.FLOOR, see mxfp4Scale).
type MXFP4 struct {
	Filter Filter // nil: DefaultFilter
	codedLinears
	declines declined.Log
}

func NewMXFP4() *MXFP4 { return &MXFP4{} }

func (*MXFP4) Name() string { return "mxfp4" }

// Declined says why ConvertModule left the Linear at path as it was (the
// precision.ConversionReporter role).
func (p *MXFP4) Declined(path string) (string, bool) { return p.declines.Why(path) }

// ConvertModule gives m MXFP4 GEMMs if it is an eligible Linear whose
// tensor-parallel shares, if any, begin on block boundaries.
func (p *MXFP4) ConvertModule(path string, m nn.Module) error {
	l, why, err := eligible(m, FP4, p.Filter, p)
	if l != nil {
		if err := blocksWithinShares(p.Name(), l, BlockSize, "MX"); err != nil {
			return err
		}
		p.codedLinears.install(path, l, &linear{owner: p, format: FP4, q: blockScaling{scale: mxfp4Scale}})
	}
	p.declines.Note(path, why)
	return err
}

// mxfp4Scale is torchao's to_mx cast of a block of amax to dt: the scale
// exponent is amax's float32 exponent field less its bias and less
// emax(dt) (2 for E2M1), clamped to -127..128; each element is divided by
// the scale in float32 (a scale below 2^-126 divides as 2^-126, as to_mx
// clamps it; the divisor is a power of two whose reciprocal is a float32,
// so multiplying by it rounds alike), cast to dt with saturation, and
// multiplied by 2^e in float32 (2^128 is inf). A block whose amax is NaN
// is NaN.
func mxfp4Scale(amax float32, dt dtype.DType) blockScale {
	if amax != amax {
		return blockScale{dec: amax, round: dt.RoundSat}
	}
	e := int(math.Float32bits(amax)>>23&0xff) - 127 - math.Ilogb(dt.Max())
	e = min(max(e, -127), 128)
	scale := float32(math.Ldexp(1, e))
	return blockScale{enc: 1 / max(scale, 0x1p-126), dec: scale, round: dt.RoundSat}
}

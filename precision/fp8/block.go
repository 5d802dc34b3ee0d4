package fp8

import (
	"math"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision/internal/declined"
	"github.com/weftml/weft/tensor"
)

// Block is the "fp8-block" plugin: Transformer Engine's
// Float8BlockScaling (the DeepSeek-V3 recipe). The input and the output
// gradient are cast in blocks of BlockTile consecutive elements along each
// GEMM's reduction axis (1×128 for the forward and input-gradient GEMMs,
// 128×1 down the batch for the weight gradient's), the weight in
// BlockTile×BlockTile tiles whose one set of codes serves both the forward
// and the input-gradient GEMM. Each block has a float32 scale, computed
// afresh at each cast from its amax with epsilon 0 and, by default, rounded
// down to a power of two. A block's amax comes from what a rank holds, as
// for Rowwise.
type Block struct {
	Format Format // E4M3, Transformer Engine's default
	// Float32Scales keeps each scale as fp8max/amax computed, as
	// NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1 does; false (the default)
	// rounds it down to a power of two.
	Float32Scales bool
	Filter        Filter // nil: DefaultFilter
	declines      declined.Log
	codedLinears
}

// BlockTile is the number of elements along a GEMM's reduction axis that
// share one fp8-block scale, and the side of a weight's tile.
const BlockTile = 128

// NewBlock returns the recipe with Transformer Engine's defaults.
func NewBlock() *Block { return &Block{Format: E4M3} }

func (*Block) Name() string { return "fp8-block" }

// Declined says why ConvertModule left the Linear at path as it was (the
// precision.ConversionReporter role).
func (p *Block) Declined(path string) (string, bool) { return p.declines.Why(path) }

// ConvertModule gives m FP8 GEMMs if it is an eligible Linear whose
// tensor-parallel shares, if any, begin on tile boundaries.
func (p *Block) ConvertModule(path string, m nn.Module) error {
	l, why, err := eligible(m, p.Format, p.Filter, p)
	if l != nil {
		if err := blocksWithinShares(p.Name(), l, BlockTile, "fp8-block"); err != nil {
			return err
		}
		p.codedLinears.install(path, l, &linear{owner: p, format: p.Format, q: blockwise{pow2: !p.Float32Scales}})
	}
	p.declines.Note(path, why)
	return err
}

// blockwise is Block's quantizer.
type blockwise struct{ pow2 bool }

func (b blockwise) quantize(r role, t *tensor.Tensor, dt dtype.DType, _ pass) quantized {
	if t.IsMeta() { // a plan's pass: the float32 values a GEMM reads, on shapes alone
		return operand{t: tensor.Meta(dtype.F32, t.Shape()...), scale: 1}
	}
	in, vals, rows, cols := t.DType(), t.Float32s(), t.Dim(0), t.Dim(1)
	if r == roleW { // in tiles, cast as FSDP's gather of them casts them
		w, _, _ := b.weightCasts(rows, cols, in, dt)
		return w.cast(vals)
	}
	scale := func(amax float32, dt dtype.DType) blockScale { return b.scale(amax, in, dt) }
	return blocks{vals: vals, rows: rows, cols: cols, dt: dt, size: BlockTile, scale: scale, amax: amaxFinite}
}

// scale is Transformer Engine's cast to dt of a block or tile of dtype in
// whose amax is amax: each element v·s cast to dt with saturation (NaN
// stays NaN), times 1/s, s being blockwiseScale's.
func (b blockwise) scale(amax float32, in, dt dtype.DType) blockScale {
	s := blockwiseScale(amax, dt, in, b.pow2)
	return blockScale{enc: s, dec: 1 / s, round: dt.RoundSat}
}

// blockwiseScale is Transformer Engine's compute_scale_from_amax with epsilon
// 0: 1 for an amax that is 0, inf or NaN; otherwise fp8max(dt)/amax in
// float32, where it overflows the largest finite value of in (the
// tensor's dtype), and, with pow2, rounded down to a power of two by
// dropping its mantissa bits.
func blockwiseScale(amax float32, dt, in dtype.DType, pow2 bool) float32 {
	if !(amax > 0) || math.IsInf(float64(amax), 1) {
		return 1
	}
	s := float32(dt.Max()) / amax
	if math.IsInf(float64(s), 1) {
		s = float32(in.Max())
	}
	if pow2 {
		s = math.Float32frombits(math.Float32bits(s) & 0xff800000)
	}
	return s
}

// amaxFinite is the largest |v| in vals that is not NaN, as Transformer
// Engine's blockwise kernels reduce it with fmaxf, which drops NaN; 0 for
// none.
func amaxFinite(vals []float32) float32 {
	m := float32(0)
	for _, v := range vals {
		if a := float32(math.Abs(float64(v))); a > m {
			m = a
		}
	}
	return m
}

package fp8

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/bits"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/philox"
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
// before the cast. The output gradient's casts (of both its GEMMs) round
// to E2M1 stochastically, as Transformer Engine's fp4_quant_bwd_grad
// does, the others to nearest. A tensor's global scale and its blocks come
// from what a rank holds, as for Rowwise.
type NVFP4 struct {
	// StochasticRounding rounds the output gradient stochastically
	// (Transformer Engine's default); false rounds it to nearest, as
	// NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING=1 does.
	StochasticRounding bool
	Filter             Filter // nil: DefaultFilter
	seed               uint64
	rank               int
	backwards          map[string]*uint64 // by Linear path: its output gradients cast so far
	declines           declined.Log
	codedLinears
}

// NVFP4Block is the elements along a GEMM's reduction axis, and the side
// of a weight's tile, that share one E4M3 scale.
const NVFP4Block = 16

// NewNVFP4 returns the recipe with Transformer Engine's defaults.
func NewNVFP4() *NVFP4 { return &NVFP4{StochasticRounding: true} }

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
		q := nvfp4Scaling{}
		if p.StochasticRounding {
			q.sr = &stochasticCasts{seed: &p.seed, rank: &p.rank, layer: layerStream(path), count: p.backward(path)}
		}
		p.codedLinears.install(path, l, &linear{owner: p, format: FP4, q: q})
	}
	p.declines.Note(path, why)
	return err
}

// UseSeed keys the random bits of the stochastic rounding by the run's
// seed (the precision.Seeder role); the fabric calls it before any step.
func (p *NVFP4) UseSeed(seed uint64, rank int) { p.seed, p.rank = seed, rank }

// MarshalState saves how many output gradients each Linear has cast, as
// JSON by module path: the counts pick the random bits of the next casts.
func (p *NVFP4) MarshalState() ([]byte, error) {
	saved := make(map[string]uint64, len(p.backwards))
	for path, n := range p.backwards {
		saved[path] = *n
	}
	return json.Marshal(saved)
}

// UnmarshalState restores what MarshalState saved. Linears the state does
// not mention count from 0 again; on error nothing changes.
func (p *NVFP4) UnmarshalState(b []byte) error {
	var saved map[string]uint64
	if err := json.Unmarshal(b, &saved); err != nil {
		return fmt.Errorf("nvfp4: state: %w", err)
	}
	for path, n := range p.backwards {
		*n = saved[path]
	}
	for path, n := range saved {
		*p.backward(path) = n
	}
	return nil
}

// backward returns the count of the output gradients of the Linear at
// path cast so far.
func (p *NVFP4) backward(path string) *uint64 {
	if p.backwards == nil {
		p.backwards = map[string]*uint64{}
	}
	if p.backwards[path] == nil {
		p.backwards[path] = new(uint64)
	}
	return p.backwards[path]
}

// nvfp4Scaling is NVFP4's quantizer; sr, if set, rounds the output
// gradient stochastically.
type nvfp4Scaling struct{ sr *stochasticCasts }

func (q nvfp4Scaling) quantize(r role, t *tensor.Tensor, _ dtype.DType, _ pass) quantized {
	if t.IsMeta() { // a plan's pass: the float32 values a GEMM reads, on shapes alone
		return operand{t: tensor.Meta(dtype.F32, t.Shape()...), scale: 1}
	}
	m := nvfp4Matrix{vals: t.Float32s(), rows: t.Dim(0), cols: t.Dim(1), dt: t.DType(), role: r}
	if r == roleDY && q.sr != nil {
		m.bits = q.sr.next()
	}
	return m
}

// stochasticCasts places a Linear's output-gradient casts in the Philox
// streams their random bits come from: its count-th cast draws stream
// (count, layer) under the run's seed, so that runs repeat bit for bit
// and a resumed run, whose counts the plugin's state restores, draws what
// an uninterrupted one does.
type stochasticCasts struct {
	seed  *uint64 // the plugin's, which the fabric sets after conversion
	rank  *int    // likewise: each rank draws its own bits
	layer uint32  // layerStream of the Linear's path
	count *uint64 // the plugin's count of the Linear's casts
}

// next returns the stream of the next cast, and counts it.
func (s *stochasticCasts) next() *stream {
	n := *s.count
	*s.count++
	rank := uint32(*s.rank) * 0x9e3779b9 // Weyl steps apart: distinct ranks' keys differ
	return &stream{key: [2]uint32{uint32(*s.seed), uint32(*s.seed>>32) + rank}, id: [2]uint32{uint32(n), s.layer}}
}

// layerStream is the FNV-1a hash of a Linear's path, which tells its
// casts' streams from other Linears'.
func layerStream(path string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(path))
	return h.Sum32()
}

// stream is one cast's Philox stream of 16-bit words (philox.Uint16s).
type stream struct{ key, id [2]uint32 }

// words returns n words of s from word first.
func (s *stream) words(first, n int) []uint16 {
	w := make([]uint16, n)
	philox.Uint16s(w, s.key, s.id, uint64(first))
	return w
}

// nvfp4Matrix is a matrix to be cast to NVFP4 for the GEMMs that read it.
type nvfp4Matrix struct {
	vals       []float32 // row-major
	rows, cols int
	dt         dtype.DType // the matrix's, which the Hadamard transform's result takes
	role       role
	// bits, if set, round the cast stochastically: along rows element i
	// with word i, down columns element i of the transpose with word
	// rows·cols+i; nil rounds to nearest.
	bits *stream
}

// along casts the matrix for a GEMM that reduces along axis: the values
// of the E2M1 codes times their E4M3 block scales, with the tensor's
// amax/(448·6) as the operand's scale. A weight's square tiles serve both
// of its GEMMs as they are.
func (m nvfp4Matrix) along(axis int) operand {
	if m.role == roleW { // in tiles, cast as FSDP's gather of them casts them
		w, _, _ := nvfp4Scaling{}.weightCasts(m.rows, m.cols, m.dt, dtype.E2M1)
		return w.cast(m.vals)
	}
	n := len(m.vals)
	var bits []uint16
	if m.bits != nil {
		bits = m.bits.words((1-axis)*n, n)
	}
	if axis == 1 {
		out, scale := nvfp4Cast(m.vals, m.rows, m.cols, bits)
		return operand{t: tensor.FromFloat32(out, m.rows, m.cols), scale: scale}
	}
	// The weight gradient's operands, reduced down their columns: cast the
	// transpose along its rows after the Hadamard transform.
	vals := transpose(m.vals, m.rows, m.cols)
	hadamard16(vals, m.cols, m.rows)
	if m.dt != dtype.F32 {
		dtype.RoundFloat32s(m.dt, vals)
	}
	out, scale := nvfp4Cast(vals, m.cols, m.rows, bits)
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
// quantizer does, in blocks of 16 along each row (a weight's 16×16 tiles
// are its weightCasts'), and returns each element as its E2M1 code's value times
// its block's E4M3 decode scale, and the tensor's amax/2688 that
// multiplies the products back. In float32, as the reference computes:
// the global encode scale g = 2688/amax (float32's largest for amax 0,
// 1 for inf amax); a block's decode scale d = e4m3(min(max|block|·(g·(1/6)),
// 448)); its encode scale 1/(d·(1/g)); each element clamped to ±6 after
// the encode scale and cast by the reference's thresholds (to nearest,
// ties to even; NaN and -0 to +0), or, with bits (a word per element),
// by e2m1Stochastic.
func nvfp4Cast(vals []float32, rows, cols int, bits []uint16) ([]float32, float32) {
	amax := amaxOf(vals)
	out := make([]float32, len(vals))
	for r := range rows {
		for c0 := 0; c0 < cols; c0 += NVFP4Block {
			block := vals[r*cols+c0 : r*cols+min(c0+NVFP4Block, cols)]
			s := nvfp4Scale(amaxOf(block), amax)
			for k, v := range block {
				i := r*cols + c0 + k
				if bits != nil {
					out[i] = e2m1Stochastic(v*s.enc, bits[i]) * s.dec
				} else {
					out[i] = s.cast(v)
				}
			}
		}
	}
	return out, nvfp4TensorScale(amax)
}

// nvfp4TensorScale is the operand's scale of a tensor of amax, which its
// blocks' decode scales divide out.
func nvfp4TensorScale(amax float32) float32 { return amax / (448 * 6) }

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

// e2m1Stochastic is x clamped to ±6 and rounded to one of the two E2M1
// values around it, lo and lo+step (step 0.5 below 2, 1 below 4, 2 above),
// as the .rs conversions round: the 16 random bits r are added to the 16
// bits of |x| below E2M1's last kept bit, frac = (|x|-lo)/step, and the
// sum truncated, so |x| rounds away from zero iff floor(frac·2^16) + r ≥
// 2^16, with probability frac to within 2^-16: unbiased. NaN and ±0 give
// +0, and a negative x that rounds to 0 gives -0, as e2m1Reference does.
func e2m1Stochastic(x float32, r uint16) float32 {
	x = max(min(x, 6), -6) // NaN stays NaN
	a := math.Abs(float64(x))
	if !(a > 0) {
		return 0
	}
	step := 2.0
	switch {
	case a < 2:
		step = 0.5
	case a < 4:
		step = 1
	}
	lo := math.Floor(a/step) * step
	if math.Floor((a-lo)/step*(1<<16))+float64(r) >= 1<<16 {
		lo += step
	}
	return float32(math.Copysign(lo, float64(x)))
}

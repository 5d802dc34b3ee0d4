package fp8

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/torchoracle"
	"github.com/weftml/weft/tensor"
)

// normalRow is n normal values of standard deviation scale from rng.
func normalRow(rng *rand.Rand, n int, scale float64) []float32 {
	r := make([]float32, n)
	for i := range r {
		r[i] = float32(rng.NormFloat64() * scale)
	}
	return r
}

// rowwiseCases are matrices whose rows hold what a cast must get right:
// random values of several magnitudes, a zero row (amax 0), float32
// denormals, E4M3 ties at scale 1, ±0, inf and NaN (in one column, so the
// other columns stay finite), huge and tiny values, and an amax whose
// scale 448/amax lies just below 8, where float32's log2 rounds up to 3.
func rowwiseCases() (finite, all [][]float32) {
	rng := rand.New(rand.NewPCG(8, 8))
	const cols = 16
	spread := make([]float32, cols)
	for i := range spread {
		spread[i] = float32(math.Ldexp(rng.Float64()+0.5, rng.IntN(31)-20)) * float32(1-2*rng.IntN(2))
	}
	ties := []float32{448, -448, 1.0625, 1.1875, -1.0625, 3 * 0x1p-10, 0x1p-10, 0x1p-7 + 0x1p-10, 13, 15, 17, 208, 232, -240, 0.5, 0.5625}
	denormal := []float32{0x1p-140, -0x1p-149, 0, float32(math.Copysign(0, -1)), 3e-39, 1e-45, -2e-40, 0, 0x1p-127, 0, 0, 0, 0, 0, 0, 0}
	signs := []float32{float32(math.Copysign(0, -1)), -1e-9, 1e-9, -1, 1, 0, -0.25, 0.25, -3, 3, -1e-6, 1e-6, -100, 100, -7, 7}
	just := normalRow(rng, cols, 1)
	just[0] = math.Nextafter32(56, 100) // 448/amax rounds to the float32 just below 8
	for i := 1; i < cols; i++ {
		just[i] = float32(math.Mod(float64(just[i]), 56))
	}
	just[1], just[2] = 3*0x1p-12, -5*0x1p-13 // E4M3 subnormals at scale 8, halfway between two at scale 4
	finite = [][]float32{normalRow(rng, cols, 1), normalRow(rng, cols, 1e-3), make([]float32, cols), denormal, ties, signs, normalRow(rng, cols, 1e30), normalRow(rng, cols, 1e-20), spread, just}
	inf, nan := normalRow(rng, cols, 1), normalRow(rng, cols, 1)
	inf[3], nan[3] = float32(math.Inf(1)), float32(math.NaN())
	return finite, append(append([][]float32{}, finite...), inf, nan)
}

// oracleCasts runs testdata/fp8/oracle.py in mode on the matrix whose
// rows are rows, followed in its input by bits (little-endian), and
// returns its values and the n matrices the oracle computes, row-major,
// and then the float32s it writes after them.
func oracleCasts(t *testing.T, mode string, rows [][]float32, n int, bits []uint16) (vals []float32, out [][]float32, more []float32) {
	t.Helper()
	for _, r := range rows {
		vals = append(vals, r...)
	}
	raw := make([]byte, 0, 4*len(vals)+2*len(bits))
	for _, v := range vals {
		raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
	}
	in := raw
	for _, b := range bits {
		in = binary.LittleEndian.AppendUint16(in, b)
	}
	raw = raw[:4*len(vals)]
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "in.f32"), filepath.Join(dir, "out.f32")
	if err := os.WriteFile(src, in, 0o644); err != nil {
		t.Fatal(err)
	}
	torchoracle.Run(t, "../../testdata/fp8/oracle.py", mode, src, dst, fmt.Sprint(len(rows)), fmt.Sprint(len(rows[0])))
	b, err := os.ReadFile(dst)
	if err != nil || len(b) < n*len(raw) || len(b)%4 != 0 {
		t.Fatalf("oracle output: %d bytes (%v), want %d and float32s after them", len(b), err, n*len(raw))
	}
	all := make([]float32, len(b)/4)
	for j := range all {
		all[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
	}
	for i := range n {
		out = append(out, all[i*len(vals):(i+1)*len(vals)])
	}
	return vals, out, all[n*len(vals):]
}

// sameBits requires got to hold want's bits (any NaN for a NaN), naming
// each element that differs by its row and column among cols.
func sameBits(t *testing.T, what string, vals, got, want []float32, cols int) {
	t.Helper()
	for j, g := range got {
		if w := want[j]; math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
			t.Errorf("%s: element [%d %d] = %v: got %v (%#x), want %v (%#x)", what, j/cols, j%cols, vals[j], g, math.Float32bits(g), w, math.Float32bits(w))
		}
	}
}

// TestRowwiseMatchesOracle casts the rowwiseCases as torchao's rowwise
// recipe does (one scale per row, per column, and, as rowwise_with_gw_hp
// casts the weight for the input gradient, per matrix) and requires the
// values testdata/fp8/oracle.py computes, bit for bit (NaN for NaN).
func TestRowwiseMatchesOracle(t *testing.T) {
	torchoracle.Need(t)
	finite, all := rowwiseCases()
	for name, rows := range map[string][][]float32{"finite": finite, "with inf and NaN": all} {
		t.Run(name, func(t *testing.T) {
			vals, want, _ := oracleCasts(t, "rowwise", rows, 3, nil)
			n, cols := len(rows), len(rows[0])
			x := tensor.FromFloat32(vals, n, cols)
			w := axiswise{highPrecisionWeightGrad: true}.quantize(roleW, x, dtype.E4M3FN, training)
			sameBits(t, "per row", vals, w.along(1).t.Float32s(), want[0], cols)
			sameBits(t, "per column", vals, axiswise{}.quantize(roleX, x, dtype.E4M3FN, training).along(0).t.Float32s(), want[1], cols)
			sameBits(t, "per matrix", vals, w.along(0).t.Float32s(), want[2], cols)
		})
	}
}

// mxfp4Cases are rows of 40 elements (a block of 32 and one of 8) holding
// what an MXFP4 cast must get right: random values of several magnitudes,
// E2M1 ties and saturation at scale 1, a zero block, denormals, an amax
// whose exponent field is 0 (scale 2^-127, which to_mx divides by as
// 2^-126), amaxes near float32's largest, inf and NaN.
func mxfp4Cases() [][]float32 {
	rng := rand.New(rand.NewPCG(4, 4))
	const cols = 40
	ties := normalRow(rng, cols, 1)
	copy(ties, []float32{4, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -5, -0.25, 7, -7, float32(math.Copysign(0, -1))})
	copy(ties[32:], []float32{6, 5, 0.25, 0.75, -2.5, 3.5, 1.25, 0})
	tiny := make([]float32, cols)
	copy(tiny, []float32{0x1p-127, 0x1p-130, -0x1p-128, 3e-39, 1e-45})
	huge := normalRow(rng, cols, 1e38)
	special := normalRow(rng, cols, 1)
	special[3], special[35] = float32(math.Inf(1)), float32(math.Inf(-1))
	nan := normalRow(rng, cols, 1)
	nan[5] = float32(math.NaN())
	return [][]float32{normalRow(rng, cols, 1), normalRow(rng, cols, 1e-3), normalRow(rng, cols, 1e6), ties, make([]float32, cols), tiny, huge, special, nan}
}

// TestMXFP4MatchesOracle casts the mxfp4Cases in E2M1 blocks along rows
// and down columns and requires what torchao's to_mx and to_dtype give,
// as testdata/fp8/oracle.py computes them, bit for bit (NaN for NaN).
func TestMXFP4MatchesOracle(t *testing.T) {
	torchoracle.Need(t)
	rows := mxfp4Cases()
	vals, want, _ := oracleCasts(t, "mxfp4", rows, 2, nil)
	n, cols := len(rows), len(rows[0])
	q := blockScaling{scale: mxfp4Scale}.quantize(roleX, tensor.FromFloat32(vals, n, cols), dtype.E2M1, training)
	sameBits(t, "along rows", vals, q.along(1).t.Float32s(), want[0], cols)
	sameBits(t, "down columns", vals, q.along(0).t.Float32s(), want[1], cols)
}

// nvfp4Cases are matrices of 40×40 (two blocks of 16 and one of 8 along
// each axis, and so a last Hadamard block left as it is): rows of several
// magnitudes, a zero block, -0 and denormals, values at E2M1's thresholds
// for the scale a block of amax 6 gets; one matrix finite, one with inf,
// one with NaN (each decides its tensor's global scale).
func nvfp4Cases() map[string][][]float32 {
	rng := rand.New(rand.NewPCG(6, 6))
	const n = 40
	matrix := func() [][]float32 {
		m := make([][]float32, n)
		for r := range m {
			m[r] = normalRow(rng, n, math.Ldexp(1, 3*(r%7)-9))
		}
		for c := range 16 {
			m[5][c] = 0
		}
		copy(m[6], []float32{float32(math.Copysign(0, -1)), 1e-40, -3e-39, 0x1p-149, 6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -0.25, -0.75, -5, 4.9})
		return m
	}
	finite, inf, nan := matrix(), matrix(), matrix()
	inf[9][20] = float32(math.Inf(-1))
	nan[11][3] = float32(math.NaN())
	return map[string][][]float32{"finite": finite, "with inf": inf, "with NaN": nan}
}

// TestNVFP4MatchesOracle casts the nvfp4Cases as Transformer Engine's
// NVFP4 reference quantizer does, the input along rows, down columns after
// the Hadamard transform (the weight gradient's operand), and the weight
// in 16×16 tiles both ways, and requires what testdata/fp8/oracle.py
// computes, bit for bit (NaN for NaN), global scales included.
func TestNVFP4MatchesOracle(t *testing.T) {
	torchoracle.Need(t)
	for name, rows := range nvfp4Cases() {
		t.Run(name, func(t *testing.T) {
			vals, want, scales := oracleCasts(t, "nvfp4", rows, 3, nil)
			n, cols := len(rows), len(rows[0])
			x := tensor.FromFloat32(vals, n, cols)
			q, w := nvfp4Scaling{}.quantize(roleX, x, dtype.E2M1, training), nvfp4Scaling{}.quantize(roleW, x, dtype.E2M1, training)
			for i, o := range []operand{q.along(1), q.along(0), w.along(1), w.along(0)} {
				what := []string{"along rows", "down columns, transformed", "in tiles", "in tiles, for the transpose"}[i]
				sameBits(t, what, vals, o.t.Float32s(), want[min(i, 2)], cols)
				sameBits(t, what+": the global scale", vals, []float32{o.scale}, []float32{scales[min(i, 2)]}, 1)
			}
		})
	}
}

// blockCases are matrices of 136×200 (a whole 128-element block and a
// partial one along each axis, so partial edge tiles of 8 rows and 72
// columns): rows of several magnitudes; E4M3 ties at scale 1 (a block of
// amax 448) beside a block of float32 denormals and ±0 (a scale beyond
// float32, which becomes its largest); a block whose 448/amax lies just
// below 8 (which the power-of-two rounding takes down to 4); zero blocks
// along rows, down columns and a zero edge tile; one matrix finite, one
// with inf, one with NaN (each in a block of its own).
func blockCases() map[string][][]float32 {
	rng := rand.New(rand.NewPCG(12, 12))
	const rows, cols = 136, 200
	finite, _ := rowwiseCases()
	ties, denormal, just := finite[4], finite[3], finite[9]
	matrix := func() [][]float32 {
		m := make([][]float32, rows)
		for r := range m {
			m[r] = normalRow(rng, cols, math.Ldexp(1, 3*(r%7)-9))
		}
		clear(m[5][128:])
		m[6] = make([]float32, cols)
		copy(m[6], ties)
		copy(m[6][128:], denormal)
		clear(m[7])
		copy(m[7][128:], just)
		for r := range 128 {
			m[r][199] = 0
		}
		for r := 128; r < rows; r++ {
			clear(m[r][128:])
		}
		return m
	}
	finiteM, inf, nan := matrix(), matrix(), matrix()
	inf[9][20] = float32(math.Inf(-1))
	nan[11][140] = float32(math.NaN())
	return map[string][][]float32{"finite": finiteM, "with inf": inf, "with NaN": nan}
}

// TestBlockMatchesOracle casts the blockCases as Transformer Engine's
// Float8BlockScaling does, the input in 1×128 blocks along rows (the
// forward's and input gradient's operands) and down columns (the weight
// gradient's), the weight in 128×128 tiles both ways, and the input with
// float32 scales, and requires what testdata/fp8/oracle.py computes, bit
// for bit (NaN for NaN).
func TestBlockMatchesOracle(t *testing.T) {
	torchoracle.Need(t)
	for name, rows := range blockCases() {
		t.Run(name, func(t *testing.T) {
			vals, want, _ := oracleCasts(t, "block", rows, 4, nil)
			n, cols := len(rows), len(rows[0])
			x := tensor.FromFloat32(vals, n, cols)
			q, w := blockwise{pow2: true}.quantize(roleX, x, dtype.E4M3FN, training), blockwise{pow2: true}.quantize(roleW, x, dtype.E4M3FN, training)
			f32 := blockwise{}.quantize(roleDY, x, dtype.E4M3FN, training)
			for i, o := range []operand{q.along(1), q.along(0), w.along(1), w.along(0), f32.along(1)} {
				what := []string{"along rows", "down columns", "in tiles", "in tiles, for the transpose", "along rows, float32 scales"}[i]
				sameBits(t, what, vals, o.t.Float32s(), want[[]int{0, 1, 2, 2, 3}[i]], cols)
				if o.scale != 1 {
					t.Errorf("%s: operand scale %v, want 1 (the values hold the block scales)", what, o.scale)
				}
			}
		})
	}
}

// TestNVFP4StochasticMatchesOracle casts the nvfp4Cases as the output
// gradient, rounded stochastically, along rows and down columns after the
// Hadamard transform, and requires what testdata/fp8/oracle.py computes
// from the same random words, bit for bit (NaN for NaN), global scales
// included.
func TestNVFP4StochasticMatchesOracle(t *testing.T) {
	torchoracle.Need(t)
	seed, count := uint64(0x5eed), uint64(3)
	for name, rows := range nvfp4Cases() {
		t.Run(name, func(t *testing.T) {
			var vals []float32
			for _, r := range rows {
				vals = append(vals, r...)
			}
			n, cols := len(rows), len(rows[0])
			sr := &stochasticCasts{seed: &seed, rank: new(int), layer: layerStream("blocks.0.mlp.fc"), count: &count}
			q := nvfp4Scaling{sr: sr}.quantize(roleDY, tensor.FromFloat32(vals, n, cols), dtype.E2M1, training)
			bits := q.(nvfp4Matrix).bits.words(0, 2*len(vals))
			_, want, scales := oracleCasts(t, "nvfp4sr", rows, 2, bits)
			for i, o := range []operand{q.along(1), q.along(0)} {
				what := []string{"along rows", "down columns, transformed"}[i]
				sameBits(t, what, vals, o.t.Float32s(), want[i], cols)
				sameBits(t, what+": the global scale", vals, []float32{o.scale}, []float32{scales[i]}, 1)
			}
		})
	}
}

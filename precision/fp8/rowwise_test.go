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

// rowwiseCases are matrices whose rows hold what a cast must get right:
// random values of several magnitudes, a zero row (amax 0), float32
// denormals, E4M3 ties at scale 1, ±0, inf and NaN (in one column, so the
// other columns stay finite), huge and tiny values, and an amax whose
// scale 448/amax lies just below 8, where float32's log2 rounds up to 3.
func rowwiseCases() (finite, all [][]float32) {
	rng := rand.New(rand.NewPCG(8, 8))
	const cols = 16
	row := func(scale float64) []float32 {
		r := make([]float32, cols)
		for i := range r {
			r[i] = float32(rng.NormFloat64() * scale)
		}
		return r
	}
	spread := make([]float32, cols)
	for i := range spread {
		spread[i] = float32(math.Ldexp(rng.Float64()+0.5, rng.IntN(31)-20)) * float32(1-2*rng.IntN(2))
	}
	ties := []float32{448, -448, 1.0625, 1.1875, -1.0625, 3 * 0x1p-10, 0x1p-10, 0x1p-7 + 0x1p-10, 13, 15, 17, 208, 232, -240, 0.5, 0.5625}
	denormal := []float32{0x1p-140, -0x1p-149, 0, float32(math.Copysign(0, -1)), 3e-39, 1e-45, -2e-40, 0, 0x1p-127, 0, 0, 0, 0, 0, 0, 0}
	signs := []float32{float32(math.Copysign(0, -1)), -1e-9, 1e-9, -1, 1, 0, -0.25, 0.25, -3, 3, -1e-6, 1e-6, -100, 100, -7, 7}
	just := row(1)
	just[0] = math.Nextafter32(56, 100) // 448/amax rounds to the float32 just below 8
	for i := 1; i < cols; i++ {
		just[i] = float32(math.Mod(float64(just[i]), 56))
	}
	just[1], just[2] = 3*0x1p-12, -5*0x1p-13 // E4M3 subnormals at scale 8, halfway between two at scale 4
	finite = [][]float32{row(1), row(1e-3), make([]float32, cols), denormal, ties, signs, row(1e30), row(1e-20), spread, just}
	inf, nan := row(1), row(1)
	inf[3], nan[3] = float32(math.Inf(1)), float32(math.NaN())
	return finite, append(append([][]float32{}, finite...), inf, nan)
}

// TestRowwiseMatchesOracle casts the rowwiseCases as torchao's rowwise
// recipe does (one scale per row, per column, and, as rowwise_with_gw_hp
// casts the weight for the input gradient, per matrix) and requires the
// values testdata/fp8/rowwise_oracle.py computes, bit for bit (NaN for NaN).
func TestRowwiseMatchesOracle(t *testing.T) {
	torchoracle.Need(t)
	finite, all := rowwiseCases()
	for name, rows := range map[string][][]float32{"finite": finite, "with inf and NaN": all} {
		t.Run(name, func(t *testing.T) {
			n, cols := len(rows), len(rows[0])
			vals := make([]float32, 0, n*cols)
			for _, r := range rows {
				vals = append(vals, r...)
			}
			dir := t.TempDir()
			in, out := filepath.Join(dir, "in.f32"), filepath.Join(dir, "out.f32")
			raw := make([]byte, 0, 4*len(vals))
			for _, v := range vals {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
			}
			if err := os.WriteFile(in, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			torchoracle.Run(t, "../../testdata/fp8/rowwise_oracle.py", in, out, fmt.Sprint(n), fmt.Sprint(cols))
			b, err := os.ReadFile(out)
			if err != nil || len(b) != 3*len(raw) {
				t.Fatalf("oracle output: %d bytes (%v), want %d", len(b), err, 3*len(raw))
			}
			x := tensor.FromFloat32(vals, n, cols)
			q := axiswise{highPrecisionWeightGrad: true}
			w := q.quantize(roleW, x, dtype.E4M3FN, training)
			for i, got := range []*tensor.Tensor{w.along(1).t, axiswise{}.quantize(roleX, x, dtype.E4M3FN, training).along(0).t, w.along(0).t} {
				what := []string{"per row", "per column", "per matrix"}[i]
				for j, g := range got.Float32s() {
					want := math.Float32frombits(binary.LittleEndian.Uint32(b[4*(i*len(vals)+j):]))
					if math.Float32bits(g) != math.Float32bits(want) && !(g != g && want != want) {
						t.Errorf("%s: element [%d %d] = %v: got %v (%#x), want %v (%#x)", what, j/cols, j%cols, vals[j], g, math.Float32bits(g), want, math.Float32bits(want))
					}
				}
			}
		})
	}
}

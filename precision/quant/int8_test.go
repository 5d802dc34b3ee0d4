package quant

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

func TestQuantizeRows(t *testing.T) {
	x := tensor.FromFloat32([]float32{
		1, -2, 6, 0.5, // 6 is an outlier: column 2 goes to higher precision
		0.25, 4, -0.1, 0,
		0, 0, 0, 0,
	}, 3, 4)
	q, outliers := QuantizeRows(x, DefaultThreshold)
	if !slices.Equal(outliers, []int{2}) {
		t.Errorf("outlier columns %v, want [2]", outliers)
	}
	// Row 0's absmax leaves the outlier out; 1·127/2 = 63.5 rounds to even.
	wantCodes := []float32{64, -127, 0, 32, 8, 127, 0, 0, 0, 0, 0, 0}
	if got := q.Codes.Float32s(); !slices.Equal(got, wantCodes) {
		t.Errorf("codes %v, want %v", got, wantCodes)
	}
	if !slices.Equal(q.Absmax, []float32{2, 4, 0}) {
		t.Errorf("absmax %v, want [2 4 0]", q.Absmax)
	}
	q, outliers = QuantizeRows(x, 0)
	if outliers != nil || q.Absmax[0] != 6 {
		t.Errorf("without a threshold: outliers %v and row 0's absmax %v, want none and 6", outliers, q.Absmax[0])
	}
	// -2·127/6 = -42.33 rounds to -42, which decodes to (-42·6)·(1/127).
	if got, want := q.Dequantize(dtype.F32).Float32s()[1], float32(-42*6)*inv127; got != want {
		t.Errorf("-2 decodes to %v, want %v", got, want)
	}
}

// exactRows returns a [rows, cols] matrix whose row r holds integers
// k ∈ [-127, 127] times scale[r]/127, with one ±127 a row so that
// row-wise int8 quantization recovers every k exactly.
func exactRows(rng *rand.Rand, rows, cols int) []float32 {
	out := make([]float32, rows*cols)
	for r := range rows {
		scale := float32(0.5 + rng.Float64())
		for c := range cols {
			k := rng.IntN(255) - 127
			if c == r%cols {
				k = 127
			}
			out[r*cols+c] = float32(k) * (scale / 127)
		}
	}
	return out
}

// reference returns x·wᵀ in float64.
func reference(x, w []float32, m, in, out int) []float64 {
	y := make([]float64, m*out)
	for i := range m {
		for o := range out {
			for k := range in {
				y[i*out+o] += float64(x[i*in+k]) * float64(w[o*in+k])
			}
		}
	}
	return y
}

func maxAbsDiff(a []float32, b []float64) (diff, scale float64) {
	for i := range a {
		diff = max(diff, math.Abs(float64(a[i])-b[i]))
		scale = max(scale, math.Abs(b[i]))
	}
	return diff, scale
}

// TestMixedLinear checks LLM.int8()'s decomposition on inputs whose
// regular part int8 holds exactly: with the outlier columns (values of 40)
// computed in float32, x·wᵀ matches float64 to float32 rounding; computing
// them in int8 too (threshold 0) crushes the rest of their rows.
func TestMixedLinear(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const m, in, out = 8, 48, 16
	xs, ws := exactRows(rng, m, in), exactRows(rng, out, in)
	for _, r := range []int{1, 5} {
		xs[r*in+3], xs[r*in+17] = 40, -40.5
	}
	xs[6*in+17] = 0.125 // a regular value in an outlier column
	x, w := tensor.FromFloat32(xs, m, in), tensor.FromFloat32(ws, out, in)
	want := reference(xs, ws, m, in, out)
	qw, _ := QuantizeRows(w, 0)

	y, outliers := mixedLinear(x, qw, nil, DefaultThreshold)
	if !slices.Equal(outliers, []int{3, 17}) {
		t.Fatalf("outlier columns %v, want [3 17]", outliers)
	}
	diff, scale := maxAbsDiff(y.Float32s(), want)
	t.Logf("decomposed: max |y - float64| = %.3g of max |y| = %.3g", diff, scale)
	if diff > 2e-6*scale {
		t.Errorf("decomposed int8 GEMM is %.3g off float64 (max |y| %.3g); want float32 rounding only", diff, scale)
	}
	y0, _ := mixedLinear(x, qw, nil, 0)
	diff0, _ := maxAbsDiff(y0.Float32s(), want)
	if diff0 < 1000*diff {
		t.Errorf("without decomposition the error is %.3g, with it %.3g: the outliers should cost int8 much more", diff0, diff)
	}

	bias := tensor.FromFloat32(normal(rng, out), out)
	yb, _ := mixedLinear(x.To(dtype.BF16), qw, bias, DefaultThreshold)
	if yb.DType() != dtype.BF16 {
		t.Errorf("bfloat16 input gives a %s output", yb.DType())
	}
	b := bias.Float32s()
	for i := range want {
		want[i] += float64(b[i%out])
	}
	if diff, scale := maxAbsDiff(yb.Float32s(), want); diff > 0.02*scale {
		t.Errorf("bfloat16 with bias: max error %.3g of %.3g", diff, scale)
	}
}

// TestWeightGradInt8 checks int8 training's weight gradient against
// float64: the outlier column exact, every other element within the
// worst case of int8 rounding, Σ_m |dy|·hx + |x|·hdy + hx·hdy, where hx
// and hdy are half a quantization step of the column of x and of dy.
func TestWeightGradInt8(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const m, in, out = 64, 24, 12
	xs, dys := normal(rng, m*in), normal(rng, m*out)
	xs[7*in+5] = 30
	x, dy := tensor.FromFloat32(xs, m, in), tensor.FromFloat32(dys, m, out)
	_, outliers := QuantizeRows(x, DefaultThreshold)
	dw := weightGradInt8(dy, x, outliers).Float32s()
	dyT, xT := tensor.Permute(dy, 1, 0), tensor.Permute(x, 1, 0)
	want := reference(dyT.Float32s(), xT.Float32s(), out, m, in) // Σ_m dy[m, o]·x[m, i]
	qdy, _ := QuantizeRows(dyT, 0)
	qx, _ := QuantizeRows(xT, 0)
	for o := range out {
		for i := range in {
			got, want := float64(dw[o*in+i]), want[o*in+i]
			if i == 5 {
				if math.Abs(got-want) > 1e-6*(1+math.Abs(want)) {
					t.Errorf("outlier column: dw[%d, 5] = %v, want %v", o, got, want)
				}
				continue
			}
			hdy, hx := float64(qdy.Absmax[o])/254, float64(qx.Absmax[i])/254
			var bound float64
			for r := range m {
				bound += math.Abs(float64(dys[r*out+o]))*hx + math.Abs(float64(xs[r*in+i]))*hdy + hx*hdy
			}
			if e := math.Abs(got - want); e > bound*1.0001+1e-5 {
				t.Errorf("dw[%d, %d] = %v, %.3g off float64 %v; int8 rounding accounts for %.3g", o, i, got, e, want, bound)
			}
		}
	}
}

package quant

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// bnbDynamicPositive are the positive values short of 1 of bitsandbytes'
// dynamic map, create_dynamic_map(signed=True)[128:255] as torch computes
// it, copied from a dump of the map (UINT8_GRID, "bitsandbytes/functional.py
// #L363" at e772a9e) in a public QLoRA port. The map holds their negations,
// 0 and 1 besides.
var bnbDynamicPositive = []float64{
	5.500000384017767e-07, 3.250000190746505e-06, 7.749999895168003e-06, 2.1249998098937795e-05,
	4.374999844003469e-05, 6.625000241911039e-05, 8.874999912222847e-05, 0.00015625001105945557,
	0.0002687500382307917, 0.0003812500217463821, 0.000493750034365803, 0.0006062500760890543,
	0.0007187500596046448, 0.0008312499849125743, 0.0009437500848434865, 0.001281249918974936,
	0.001843750011175871, 0.002406249986961484, 0.002968749962747097, 0.0035312497057020664,
	0.004093749914318323, 0.0046562496572732925, 0.0052187503315508366, 0.005781250074505806,
	0.006343749817460775, 0.006906250026077032, 0.0074687497690320015, 0.008031249977648258,
	0.008593750186264515, 0.009156249463558197, 0.009718749672174454, 0.011406250298023224,
	0.014218750409781933, 0.017031250521540642, 0.019843751564621925, 0.02265625074505806,
	0.025468749925494194, 0.028281250968575478, 0.031093750149011612, 0.033906251192092896,
	0.03671875223517418, 0.039531249552965164, 0.04234374687075615, 0.04515625163912773,
	0.047968748956918716, 0.05078125, 0.053593751043081284, 0.05640624836087227,
	0.05921875312924385, 0.062031250447034836, 0.06484375149011612, 0.0676562562584877,
	0.07046874612569809, 0.07328125089406967, 0.07609374821186066, 0.07890625298023224,
	0.08171875774860382, 0.08453124761581421, 0.08734375238418579, 0.09015624970197678,
	0.09296875447034836, 0.09578125923871994, 0.09859374910593033, 0.10703125596046448,
	0.12109375, 0.13515624403953552, 0.14921875298023224, 0.16328124701976776,
	0.17734375596046448, 0.19140625, 0.20546874403953552, 0.21953125298023224,
	0.23359374701976776, 0.24765624105930328, 0.26171875, 0.2757812738418579,
	0.28984373807907104, 0.30390626192092896, 0.3179687261581421, 0.33203125,
	0.3460937440395355, 0.36015623807907104, 0.37421876192092896, 0.3882812261581421,
	0.40234375, 0.4164062440395355, 0.43046873807907104, 0.44453126192092896,
	0.4585937261581421, 0.47265625, 0.48671871423721313, 0.500781238079071,
	0.5148437023162842, 0.5289062261581421, 0.54296875, 0.5570312738418579,
	0.5710937976837158, 0.585156261920929, 0.5992187261581421, 0.61328125,
	0.6273437738418579, 0.6414062976837158, 0.655468761920929, 0.6695312261581421,
	0.68359375, 0.6976562738418579, 0.7117187976837158, 0.725781261920929,
	0.7398437261581421, 0.75390625, 0.7679687738418579, 0.782031238079071,
	0.796093761920929, 0.8101562261581421, 0.82421875, 0.8382812738418579,
	0.852343738079071, 0.866406261920929, 0.8804687261581421, 0.89453125,
	0.9085937738418579, 0.922656238079071, 0.936718761920929, 0.9507812261581421,
	0.96484375, 0.9789062738418579, 0.992968738079071,
}

func TestDynamicMap(t *testing.T) {
	if dynamicMap[127] != 0 || dynamicMap[255] != 1 {
		t.Errorf("dynamicMap[127], [255] = %v, %v; want 0, 1", dynamicMap[127], dynamicMap[255])
	}
	for i, v := range bnbDynamicPositive {
		want := float32(v)
		if dynamicMap[128+i] != want || dynamicMap[126-i] != -want {
			t.Errorf("dynamicMap[%d], [%d] = %v, %v; bitsandbytes has %v, %v", 128+i, 126-i, dynamicMap[128+i], dynamicMap[126-i], want, -want)
		}
	}
}

func TestNearestDynamic(t *testing.T) {
	for i, v := range dynamicMap {
		if got := nearestDynamic(v); got != uint8(i) {
			t.Errorf("nearestDynamic(%v) = %d, want %d", v, got, i)
		}
	}
	mid := (dynamicMap[200] + dynamicMap[201]) / 2
	if got := nearestDynamic(mid); got != 200 && dynamicMap[201]-mid == mid-dynamicMap[200] {
		t.Errorf("a tie between codes 200 and 201 went to %d, want the lower, as argmin does", got)
	}
	for _, c := range []struct {
		x    float32
		want uint8
	}{{2, 255}, {-2, 0}, {float32(math.NaN()), 0}, {1e-9, 127}} {
		if got := nearestDynamic(c.x); got != c.want {
			t.Errorf("nearestDynamic(%v) = %d, want %d", c.x, got, c.want)
		}
	}
}

// tableBlock returns a block of n values code·absmax over the codes of cb,
// in a shuffled order, holding the code of value 1 so that the block's
// absmax is absmax itself.
func tableBlock(rng *rand.Rand, cb *Codebook, n int, absmax float32) []float32 {
	one := cb.Encode(1)
	out := make([]float32, n)
	for i := range out {
		code := uint8(rng.IntN(16))
		if i == n/2 {
			code = one
		}
		out[i] = cb.Value(code) * absmax
	}
	return out
}

// TestQuantizeExact quantizes blocks of table values times an absmax that
// is not a power of two: each decodes exactly, in float32 and in bfloat16.
func TestQuantizeExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, cb := range []*Codebook{NF4, FP4} {
		var vals []float32
		for _, absmax := range []float32{0.37, 3.1e-3, 41, 1} {
			vals = append(vals, tableBlock(rng, cb, DefaultBlockSize, absmax)...)
		}
		x := tensor.FromFloat32(vals, 4, DefaultBlockSize)
		q := Quantize4(cb, x, DefaultBlockSize, false)
		got := q.Dequantize(dtype.F32).Float32s()
		for i, v := range vals {
			if got[i] != v {
				t.Fatalf("%s: element %d = %v decodes to %v", cb.Name(), i, v, got[i])
			}
		}
		if got, want := q.Dequantize(dtype.BF16), x.To(dtype.BF16); string(got.Data()) != string(want.Data()) {
			t.Errorf("%s: dequantizing to bfloat16 is not the float32 result rounded once", cb.Name())
		}
	}
}

// TestPacking checks bitsandbytes' nibble order: element 2i in the high
// nibble of byte i, and an odd count leaving the last low nibble 0.
func TestPacking(t *testing.T) {
	x := tensor.FromFloat32([]float32{NF4.Value(3), NF4.Value(12), NF4.Value(15), NF4.Value(0), NF4.Value(9)}, 5)
	q := Quantize4(NF4, x, DefaultBlockSize, false)
	if got, want := q.Codes.Data(), []byte{0x3c, 0xf0, 0x90}; string(got) != string(want) {
		t.Errorf("packed codes % x, want % x", got, want)
	}
	if q.Codes.DType() != dtype.I8 || q.Codes.Len() != 3 {
		t.Errorf("codes are %v, want int8[3]", q.Codes)
	}
}

// normal returns n samples of N(0, 1).
func normal(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}

// maxGap is the widest gap between consecutive values of cb.
func maxGap(cb *Codebook) float64 {
	vals := make([]float64, 16)
	for c := range uint8(16) {
		vals[c] = float64(cb.Value(c))
	}
	slices.Sort(vals)
	gap := 0.0
	for i := 1; i < 16; i++ {
		gap = max(gap, vals[i]-vals[i-1])
	}
	return gap
}

// TestNormalError quantizes N(0, 1) data in blocks of 64. Every element is
// within half the widest codebook gap of its block's absmax (0.1385 for
// NF4), plus the absmax's own error when double-quantized. The RMS error,
// measured at 0.0921σ for NF4 and 0.1222σ for FP4, must stay near those,
// and double quantization must cost next to nothing.
func TestNormalError(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	vals := normal(rng, 512*256)
	x := tensor.FromFloat32(vals, 512, 256)
	for _, c := range []struct {
		cb     *Codebook
		lo, hi float64 // RMS error bounds, in σ
	}{{NF4, 0.088, 0.096}, {FP4, 0.117, 0.127}} {
		var rms [2]float64
		exact := Quantize4(c.cb, x, DefaultBlockSize, false).Absmax
		for i, double := range []bool{false, true} {
			q := Quantize4(c.cb, x, DefaultBlockSize, double)
			absmax := q.Absmaxes()
			var se float64
			for j, v := range q.Dequantize(dtype.F32).Float32s() {
				e := math.Abs(float64(v - vals[j]))
				se += e * e
				// A double-quantized absmax a off the exact one clips by up to |a|.
				b, a := float64(absmax[j/DefaultBlockSize]), float64(exact[j/DefaultBlockSize])
				if limit := maxGap(c.cb)/2*b + math.Abs(a-b) + 1e-6; e > limit {
					t.Fatalf("%s (double %v): element %d = %v decodes to %v, %v away; the bound is %v", c.cb.Name(), double, j, vals[j], v, e, limit)
				}
			}
			rms[i] = math.Sqrt(se / float64(len(vals)))
		}
		t.Logf("%s: RMS error %.5fσ, %.5fσ double-quantized", c.cb.Name(), rms[0], rms[1])
		if rms[0] < c.lo || rms[0] > c.hi {
			t.Errorf("%s: RMS error %.5fσ, want within [%v, %v]", c.cb.Name(), rms[0], c.lo, c.hi)
		}
		if rms[1] > rms[0]*1.002 {
			t.Errorf("%s: double quantization raises the RMS error from %.5f to %.5f", c.cb.Name(), rms[0], rms[1])
		}
	}
}

// TestNestedAbsmax checks the double-quantized absmax constants: each
// within half the widest gap of the dynamic map (near ±1, 0.9/64) times its
// nested scale of the exact one.
func TestNestedAbsmax(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	x := tensor.FromFloat32(normal(rng, 1000*DefaultBlockSize+5), 1000*DefaultBlockSize+5)
	plain, nested := Quantize4(NF4, x, DefaultBlockSize, false), Quantize4(NF4, x, DefaultBlockSize, true)
	n := nested.Nested
	if len(n.Codes) != 1001 || len(n.Absmax) != 4 {
		t.Fatalf("%d codes and %d nested scales for 1001 blocks, want 1001 and 4", len(n.Codes), len(n.Absmax))
	}
	for i, got := range nested.Absmaxes() {
		want := plain.Absmax[i]
		if limit := 0.9 / 64 / 2 * float64(n.Absmax[i/NestedBlockSize]) * 1.0001; math.Abs(float64(got-want)) > limit {
			t.Errorf("block %d: absmax %v decodes to %v, more than %v off", i, want, got, limit)
		}
	}
}

// TestBitsPerParameter measures the memory of a 1024×1024 weight: NF4 is
// 4 bits a parameter plus a float32 absmax per 64 (4.5 bits); double
// quantization makes that an 8-bit code per 64 plus a float32 per 64·256,
// and the offset: 4.127 bits.
func TestBitsPerParameter(t *testing.T) {
	const n = 1024 * 1024
	x := tensor.FromFloat32(normal(rand.New(rand.NewPCG(9, 10)), n), 1024, 1024)
	for _, c := range []struct {
		double bool
		want   float64
	}{
		{false, 4 + 32.0/64},
		{true, 4 + 8.0/64 + 32.0/(64*256) + 32.0/n},
	} {
		q := Quantize4(NF4, x, DefaultBlockSize, c.double)
		bits := 8 * float64(q.Bytes()) / n
		t.Logf("double %v: %.5f bits a parameter (%d bytes)", c.double, bits, q.Bytes())
		if bits != c.want {
			t.Errorf("double %v: %.6f bits a parameter, want %.6f", c.double, bits, c.want)
		}
	}
	q := Quantize4(NF4, x, DefaultBlockSize, true)
	if bits := 8 * float64(q.Bytes()) / n; bits < 4.126 || bits > 4.128 {
		t.Errorf("nf4-dq: %.5f bits a parameter, want 4.127", bits)
	}
}

package quant

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

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

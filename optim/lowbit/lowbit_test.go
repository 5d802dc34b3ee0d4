package lowbit_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/torchoracle"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/optim/lowbit"
	"github.com/weftml/weft/tensor"
)

// q4s and q4u are AdamW4bit's codecs of m and v.
var q4s, q4u = lowbit.AdamW4bit.M, lowbit.AdamW4bit.V

// TestTorchaoOracle quantizes blocks holding every 4-bit map value, the
// float32 midpoints between neighbours (ties) and the floats either side
// of them, E4M3 midpoints, an all-zero block, subnormals, random moments
// and a partial last block of odd length with AdamW4bit's two codecs and
// AdamWFp8's, and steps a parameter of 301 elements three times with
// both, and asks for the codes, scales and values, and the parameter
// after each step, that testdata/dynamic/oracle.py computes with torch,
// bit for bit.
func TestTorchaoOracle(t *testing.T) {
	torchoracle.Need(t)
	dir := t.TempDir()
	x := oracleInput()
	writeF32(t, dir, "x.f32", x)
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 301
	p := randoms(rng, n, 1)
	writeF32(t, dir, "p.f32", p)
	var grads [][]float32
	for step := 1; step <= 3; step++ {
		g := randoms(rng, n, 0.1)
		if step == 2 {
			clear(g[:128]) // a zero gradient: moments of one sign decay
		}
		grads = append(grads, g)
		writeF32(t, dir, "g"+string(rune('0'+step))+".f32", g)
	}
	torchoracle.Run(t, filepath.Join("..", "..", "testdata", "dynamic", "oracle.py"), "torchao", dir)

	for _, c := range []struct {
		name  string
		codec lowbit.Codec
		f     *lowbit.Format
	}{{"q4s", q4s, lowbit.AdamW4bit}, {"q4u", q4u, lowbit.AdamW4bit}, {"fp8", lowbit.AdamWFp8.M, lowbit.AdamWFp8}} {
		codes := make([]byte, c.f.CodeBytes(len(x)))
		scales := make([]float32, c.f.Blocks(len(x)))
		c.codec.Encode(x, codes, scales)
		want := readBytes(t, dir, "codes_"+c.name+".u8")
		for i := range want {
			if codes[i] != want[i] {
				t.Errorf("%s: byte %d of codes (elements %d) = %#x, torch %#x", c.name, i, i*c.f.PerByte, codes[i], want[i])
			}
		}
		if want := readF32(t, dir, "scale_"+c.name+".f32"); !sameBits(scales, want) {
			t.Errorf("%s scales:\n got %v\nwant %v", c.name, scales, want)
		}
		deq := make([]float32, len(x))
		c.codec.Decode(codes, scales, deq)
		if want := readF32(t, dir, "deq_"+c.name+".f32"); !sameBits(deq, want) {
			t.Errorf("%s: decoded values differ from torch's", c.name)
		}
	}
	if want, got := readF32(t, dir, "map_q4s.f32"), decodeAll(q4s); !sameBits(got, want) {
		t.Errorf("signed 4-bit map:\n got %v\nwant %v", got, want)
	}
	if want, got := readF32(t, dir, "map_q4u.f32"), decodeAll(q4u); !sameBits(got, want) {
		t.Errorf("unsigned 4-bit map:\n got %v\nwant %v", got, want)
	}

	for name, f := range map[string]*lowbit.Format{"4bit": lowbit.AdamW4bit, "fp8": lowbit.AdamWFp8} {
		v := autograd.Param(tensor.FromFloat32(slices.Clone(p), n))
		opt, err := optim.NewAdamW([]nn.NamedParam{{Path: "w", Var: v}}, optim.AdamWConfig{
			LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, StateFormat: f,
		})
		if err != nil {
			t.Fatal(err)
		}
		for step, g := range grads {
			v.Grad = tensor.FromFloat32(slices.Clone(g), n)
			opt.Step()
			want := readF32(t, dir, "p_"+name+"_"+string(rune('1'+step))+".f32")
			if got := v.Value.Float32s(); !sameBits(got, want) {
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s step %d: element %d = %v, torch %v", name, step+1, i, got[i], want[i])
					}
				}
			}
		}
		st := opt.State("w")
		for _, mo := range []struct {
			name          string
			codes, scales *tensor.Tensor
		}{{"m", st.ExpAvg, st.ExpAvgScale}, {"v", st.ExpAvgSq, st.ExpAvgSqScale}} {
			if !slices.Equal(mo.codes.Data(), readBytes(t, dir, "codes_"+name+"_"+mo.name+".u8")) {
				t.Errorf("%s: the codes of %s after 3 steps differ from torch's", name, mo.name)
			}
			if !sameBits(mo.scales.Float32s(), readF32(t, dir, "scale_"+name+"_"+mo.name+".f32")) {
				t.Errorf("%s: the scales of %s after 3 steps differ from torch's", name, mo.name)
			}
		}
	}
}

// oracleInput is the test tensor: blocks of 256 (two of 128 each) led by
// an element that sets the scale.
func oracleInput() []float32 {
	var x []float32
	block := func(lead float32, rest []float32) {
		b := append([]float32{lead}, rest...)
		for len(b) < 256 {
			b = append(b, 0)
		}
		x = append(x, b[:256]...)
	}
	ties := func(vals []float32) []float32 { // midpoints and the floats either side
		var out []float32
		for i := range len(vals) - 1 {
			mid := (vals[i] + vals[i+1]) / 2
			out = append(out, mid, math.Nextafter32(mid, 2), math.Nextafter32(mid, -2), vals[i+1])
		}
		return out
	}
	block(1, ties(decodeAll(q4s)))
	block(1, ties(decodeAll(q4u)))
	var e4m3 []float32
	for c := range 0x7f {
		e4m3 = append(e4m3, dtype.E4M3FN.Decode(uint32(c)))
	}
	fp8Ties := ties(e4m3)
	block(448, fp8Ties[:255])
	block(-448, fp8Ties[255:])
	block(0, nil) // an all-zero block
	sub := []float32{0x1p-149, -0x1p-148, 0x3p-149, float32(math.Copysign(0, -1))}
	block(0x1p-140, sub) // subnormal scales
	block(1e-30, sub)    // x/scale subnormal in float32
	rng := rand.New(rand.NewPCG(3, 4))
	block(0.01, randoms(rng, 255, 0.01))
	return append(x, randoms(rng, 101, 1e-4)...) // a partial last block, odd
}

// decodeAll is the 16 values of a 4-bit codec, code by code.
func decodeAll(c lowbit.Codec) []float32 {
	out := make([]float32, 16)
	for code := range 16 {
		var v [1]float32
		c.Decode([]byte{byte(code) << 4}, []float32{1}, v[:])
		out[code] = v[0]
	}
	return out
}

func randoms(rng *rand.Rand, n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64() * scale)
	}
	return out
}

func writeF32(t *testing.T, dir, name string, x []float32) {
	t.Helper()
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readBytes(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readF32(t *testing.T, dir, name string) []float32 {
	b := readBytes(t, dir, name)
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// sameBits reports whether a and b hold the same floats bit for bit, any
// NaN equal to any other.
func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool {
		return math.Float32bits(x) == math.Float32bits(y) || x != x && y != y
	})
}

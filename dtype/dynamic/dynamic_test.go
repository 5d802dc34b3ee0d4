package dynamic

import (
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
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

func TestSignedMatchesBitsandbytes(t *testing.T) {
	dm := Signed.Values()
	if dm[127] != 0 || dm[255] != 1 {
		t.Errorf("dm[127], [255] = %v, %v; want 0, 1", dm[127], dm[255])
	}
	for i, v := range bnbDynamicPositive {
		want := float32(v)
		if dm[128+i] != want || dm[126-i] != -want {
			t.Errorf("dm[%d], [%d] = %v, %v; bitsandbytes has %v, %v", 128+i, 126-i, dm[128+i], dm[126-i], want, -want)
		}
	}
}

func TestNearest(t *testing.T) {
	dm := Signed.Values()
	for i, v := range dm {
		if got := Signed.Nearest(v); got != uint8(i) {
			t.Errorf("Signed.Nearest(%v) = %d, want %d", v, got, i)
		}
	}
	mid := (dm[200] + dm[201]) / 2
	if got := Signed.Nearest(mid); got != 200 && dm[201]-mid == mid-dm[200] {
		t.Errorf("a tie between codes 200 and 201 went to %d, want the lower, as argmin does", got)
	}
	for _, c := range []struct {
		x    float32
		want uint8
	}{{2, 255}, {-2, 0}, {float32(math.NaN()), 0}, {1e-9, 127}} {
		if got := Signed.Nearest(c.x); got != c.want {
			t.Errorf("Signed.Nearest(%v) = %d, want %d", c.x, got, c.want)
		}
	}
}

// python is Debian's interpreter, the one python3-torch installs into.
const python = "/usr/bin/python3"

// TestOracle quantizes blocks that hold every code's value, the float32
// midpoints between neighbours (ties) and the floats either side of them,
// random moments, a zero block, subnormals, NaN, ±inf and a partial last
// block, and asks for the codes, absmax constants, maps and decoded values
// that testdata/dynamic/oracle.py computes with torch, bit for bit.
func TestOracle(t *testing.T) {
	if err := exec.Command(python, "-c", "import torch, numpy").Run(); err != nil {
		t.Skipf("torch and numpy are not importable by %s (%v)", python, err)
	}
	dir := t.TempDir()
	inputs := map[string]struct {
		m *Map
		x []float32
	}{"signed": {Signed, oracleInput(Signed)}, "unsigned": {Unsigned, oracleInput(Unsigned)}}
	for name, in := range inputs {
		writeF32(t, filepath.Join(dir, "x_"+name+".f32"), in.x)
	}
	out, err := exec.Command(python, filepath.Join("..", "..", "testdata", "dynamic", "oracle.py"), dir, "256").CombinedOutput()
	if err != nil {
		t.Fatalf("oracle.py: %v\n%s", err, out)
	}
	for name, in := range inputs {
		if want := readF32(t, filepath.Join(dir, "map_"+name+".f32")); !sameBits(in.m.Values()[:], want) {
			t.Errorf("%s map differs from torch's create_dynamic_map:\n got %v\nwant %v", name, in.m.Values()[:], want)
		}
		codes := make([]uint8, len(in.x))
		absmax := make([]float32, Blocks(len(in.x), BlockSize))
		Quantize(in.m, in.x, BlockSize, codes, absmax)
		wantCodes, err := os.ReadFile(filepath.Join(dir, "codes_"+name+".u8"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range codes {
			if codes[i] != wantCodes[i] {
				t.Errorf("%s: element %d = %g (block absmax %g): code %d, torch %d", name, i, in.x[i], absmax[i/BlockSize], codes[i], wantCodes[i])
			}
		}
		if want := readF32(t, filepath.Join(dir, "absmax_"+name+".f32")); !sameBits(absmax, want) {
			t.Errorf("%s absmax:\n got %v\nwant %v", name, absmax, want)
		}
		deq := make([]float32, len(codes))
		Dequantize(in.m, codes, absmax, BlockSize, deq)
		if want := readF32(t, filepath.Join(dir, "deq_"+name+".f32")); !sameBits(deq, want) {
			t.Errorf("%s: dequantized values differ from torch's", name)
		}
	}
}

// oracleInput is the test tensor for m: blocks of BlockSize led by an
// element that sets the absmax.
func oracleInput(m *Map) []float32 {
	vals := m.Values()
	var mids, codes []float32
	for i := range 255 {
		mids = append(mids, (vals[i]+vals[i+1])/2)
		codes = append(codes, vals[i+1])
	}
	var x []float32
	block := func(lead float32, rest []float32) {
		b := append([]float32{lead}, rest...)
		for len(b) < BlockSize {
			b = append(b, 0)
		}
		x = append(x, b[:BlockSize]...)
	}
	scaled := func(s float32, in []float32, step func(float32) float32) []float32 {
		out := make([]float32, len(in))
		for i, v := range in {
			out[i] = step(v * s)
		}
		return out
	}
	same := func(v float32) float32 { return v }
	up := func(v float32) float32 { return math.Nextafter32(v, 2) }
	down := func(v float32) float32 { return math.Nextafter32(v, -2) }
	block(1, mids)
	block(1, codes)
	block(1, scaled(1, mids, up))
	block(1, scaled(1, mids, down))
	block(3, scaled(3, mids, same))                // absmax 3: x/3 rounds
	block(0.1, scaled(0.1, codes, same))           // a moment-sized absmax
	block(1e-3, scaled(1e-3, mids, same))          // ties after the division
	block(0, nil)                                  // a zero block
	block(0x1p-140, scaled(0x1p-140, codes, same)) // subnormal absmax
	rng := uint64(1)
	var random []float32
	for range BlockSize - 1 {
		rng = rng*6364136223846793005 + 1442695040888963407
		v := float32(int64(rng>>33)-1<<30) * 0x1p-40
		if m.Value(0) == 0 {
			v = v * v
		}
		random = append(random, v)
	}
	block(random[0], random[1:])
	nan := slices.Clone(random[:20])
	nan[7] = float32(math.NaN())
	block(1, nan)
	inf := slices.Clone(random[:20])
	inf[3] = float32(math.Inf(1))
	block(0.5, inf)
	if m.Value(0) < 0 {
		inf[3] = float32(math.Inf(-1))
		block(0.5, inf)
	}
	block(float32(math.Copysign(0, -1)), []float32{float32(math.Copysign(0, -1)), 0x1p-149})
	return append(x, random[:100]...) // a partial last block
}

func writeF32(t *testing.T, path string, x []float32) {
	t.Helper()
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readF32(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
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

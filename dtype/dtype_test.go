package dtype

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

var all = []DType{F64, F32, F16, BF16, E4M3FN, E5M2, E4M3FNUZ, E5M2FNUZ, E2M1, E8M0, I8, I32, I64}

func TestParse(t *testing.T) {
	for _, d := range all {
		if got, err := Parse(d.String()); got != d || err != nil {
			t.Errorf("Parse(%q) = %v, %v", d.String(), got, err)
		}
	}
	aliases := map[string]DType{
		"f64": F64, "double": F64, "f32": F32, "float": F32, "f16": F16, "fp16": F16,
		"half": F16, "bf16": BF16, "e4m3": E4M3FN, "fp8": E4M3FN, "e4m3fn": E4M3FN,
		"e5m2": E5M2, "e4m3fnuz": E4M3FNUZ, "e5m2fnuz": E5M2FNUZ, "e2m1": E2M1,
		"fp4": E2M1, "e8m0": E8M0, "i8": I8, "i32": I32, "i64": I64, "BF16": BF16,
	}
	for s, want := range aliases {
		if got, err := Parse(s); got != want || err != nil {
			t.Errorf("Parse(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "invalid", "float8", "bf16 "} {
		_, err := Parse(s)
		if err == nil {
			t.Errorf("Parse(%q) succeeded", s)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "float8_e4m3fn") || !strings.Contains(msg, "bf16") {
			t.Errorf("Parse(%q) error %q: want one line listing the accepted names", s, msg)
		}
	}
}

func TestString(t *testing.T) {
	for d, want := range map[DType]string{Invalid: "invalid", E2M1: "float4_e2m1fn", E8M0: "float8_e8m0fnu", DType(200): "DType(200)"} {
		if got := d.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", uint8(d), got, want)
		}
	}
}

func TestText(t *testing.T) {
	b, err := json.Marshal(map[string]DType{"x": E4M3FN})
	if err != nil || string(b) != `{"x":"float8_e4m3fn"}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var m map[string]DType
	if err := json.Unmarshal([]byte(`{"x":"bf16"}`), &m); err != nil || m["x"] != BF16 {
		t.Fatalf("Unmarshal = %v, %v", m, err)
	}
	if _, err := Invalid.MarshalText(); err == nil {
		t.Error("Invalid.MarshalText succeeded")
	}
}

func TestSizes(t *testing.T) {
	bits := []int{64, 32, 16, 16, 8, 8, 8, 8, 4, 8, 8, 32, 64}
	for i, d := range all {
		if got := d.Bits(); got != bits[i] {
			t.Errorf("%v.Bits() = %d, want %d", d, got, bits[i])
		}
		if got, want := d.StorageBytes(5), 5*bits[i]/8; d != E2M1 && got != want {
			t.Errorf("%v.StorageBytes(5) = %d, want %d", d, got, want)
		}
		if got, want := d.IsFloat(), i < 10; got != want {
			t.Errorf("%v.IsFloat() = %v", d, got)
		}
	}
	for n, want := range []int{0, 1, 1, 2, 2, 3} {
		if got := E2M1.StorageBytes(n); got != want {
			t.Errorf("E2M1.StorageBytes(%d) = %d, want %d", n, got, want)
		}
	}
	if Invalid.Bits() != 0 || Invalid.StorageBytes(3) != 0 || Invalid.IsFloat() || Invalid.Max() != 0 {
		t.Error("Invalid has nonzero properties")
	}
}

func TestMax(t *testing.T) {
	want := map[DType]float64{
		F64: math.MaxFloat64, F32: math.MaxFloat32, F16: 65504, BF16: 0x1.fep127,
		E4M3FN: 448, E5M2: 57344, E4M3FNUZ: 240, E5M2FNUZ: 57344, E2M1: 6, E8M0: 0x1p127,
		I8: 127, I32: math.MaxInt32, I64: math.MaxInt64,
	}
	for _, d := range all {
		if got := d.Max(); got != want[d] {
			t.Errorf("%v.Max() = %g, want %g", d, got, want[d])
		}
		if d == F64 || !d.IsFloat() {
			continue
		}
		// The saturating cast of ±inf lands on ±Max (E8M0 has no negatives).
		if got := float64(d.RoundSat(float32(math.Inf(1)))); got != d.Max() {
			t.Errorf("%v.RoundSat(+Inf) = %g, want %g", d, got, d.Max())
		}
		if got := float64(d.RoundSat(float32(math.Inf(-1)))); got != -d.Max() && d != E8M0 {
			t.Errorf("%v.RoundSat(-Inf) = %g, want %g", d, got, -d.Max())
		}
	}
}

// TestOverflow pins the non-saturating overflow of each format.
func TestOverflow(t *testing.T) {
	inf := float32(math.Inf(1))
	for d, want := range map[DType]float32{
		F16: inf, BF16: inf, E5M2: inf, E2M1: 6,
		E4M3FN: float32(math.NaN()), E4M3FNUZ: float32(math.NaN()), E5M2FNUZ: float32(math.NaN()), E8M0: float32(math.NaN()),
	} {
		if got := d.Round(3.4e38); !same(float64(got), float64(want)) {
			t.Errorf("%v.Round(3.4e38) = %g, want %g", d, got, want)
		}
	}
}

// TestSignedZero pins what -0 and tiny negatives become.
func TestSignedZero(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	for d, want := range map[DType]uint32{
		F16: 0x8000, BF16: 0x8000, E4M3FN: 0x80, E5M2: 0x80, E4M3FNUZ: 0, E5M2FNUZ: 0, E2M1: 0x8, E8M0: 0xff,
	} {
		for _, x := range []float32{negZero, -1e-45} {
			if got := d.Encode(x, false); got != want {
				t.Errorf("%v.Encode(%g) = %#x, want %#x", d, x, got, want)
			}
		}
	}
}

func TestE8M0(t *testing.T) {
	for x, want := range map[float32]uint32{
		1: 127, 1.5: 128, 3: 129, 1.4999999: 127, 0.75: 127, 0x1p-127: 0, 0x1.0000000p-126: 1,
		0x1.2p-127: 1, 0x1p-130: 0, 0: 0xff, -1: 0xff, 0x1p127: 254, 0x1.8p127: 0xff,
	} {
		if got := E8M0.Encode(x, false); got != want {
			t.Errorf("E8M0.Encode(%g) = %#x, want %#x", x, got, want)
		}
	}
	if got := E8M0.Encode(0x1.8p127, true); got != 254 {
		t.Errorf("E8M0.Encode(1.5·2^127, sat) = %#x, want 0xfe", got)
	}
}

func TestE2M1Packing(t *testing.T) {
	src := []float32{1, -6, 0.5, 100, float32(math.NaN())}
	dst := []byte{0xff, 0xff, 0xff, 0xff}
	Encode(E2M1, dst, src, false)
	if want := []byte{0xf2, 0x71, 0x08, 0xff}; string(dst) != string(want) {
		t.Fatalf("Encode(E2M1, %v) = % x, want % x", src, dst, want)
	}
	got := make([]float32, 5)
	Decode(E2M1, got, dst)
	for i, want := range []float32{1, -6, 0.5, 6, 0} {
		if got[i] != want {
			t.Errorf("Decode(E2M1)[%d] = %g, want %g", i, got[i], want)
		}
	}
	if !math.Signbit(float64(got[4])) {
		t.Error("E2M1 NaN decodes to +0, want -0")
	}
}

func TestInts(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	src := []float32{2.5, 3.5, -2.5, -0.5, 200, -200, nan, inf, -inf, 3e9, -3e9, 1e19, -1e19}
	want := map[DType][]int64{
		I8:  {2, 4, -2, 0, 127, -128, 0, 127, -128, 127, -128, 127, -128},
		I32: {2, 4, -2, 0, 200, -200, 0, math.MaxInt32, math.MinInt32, math.MaxInt32, math.MinInt32, math.MaxInt32, math.MinInt32},
		I64: {2, 4, -2, 0, 200, -200, 0, math.MaxInt64, math.MinInt64, 3e9, -3e9, math.MaxInt64, math.MinInt64},
	}
	for d, w := range want {
		for _, sat := range []bool{false, true} {
			dst := make([]byte, d.StorageBytes(len(src)))
			Encode(d, dst, src, sat)
			for i, x := range src {
				var got int64
				switch d {
				case I8:
					got = int64(int8(dst[i]))
				case I32:
					got = int64(int32(le.Uint32(dst[4*i:])))
				case I64:
					got = int64(le.Uint64(dst[8*i:]))
				}
				if got != w[i] {
					t.Errorf("Encode(%v, %g) = %d, want %d", d, x, got, w[i])
				}
				if d != I64 && d.Encode(x, sat) != uint32(w[i])&(1<<d.Bits()-1) {
					t.Errorf("%v.Encode(%g) = %#x, want %d", d, x, d.Encode(x, sat), w[i])
				}
				if r := d.Round(x); float64(r) != float64(float32(w[i])) {
					t.Errorf("%v.Round(%g) = %g, want %d", d, x, r, w[i])
				}
			}
			back := make([]float64, len(src))
			DecodeF64(d, back, dst)
			for i := range back {
				if back[i] != float64(w[i]) {
					t.Errorf("DecodeF64(%v)[%d] = %g, want %d", d, i, back[i], w[i])
				}
			}
		}
	}
	// Integers beyond float32's precision survive EncodeF64/DecodeF64.
	for _, d := range []DType{I32, I64} {
		src := []float64{1<<30 + 1, -(1<<30 + 3)}
		dst := make([]byte, d.StorageBytes(2))
		EncodeF64(d, dst, src, false)
		back := make([]float64, 2)
		DecodeF64(d, back, dst)
		if back[0] != src[0] || back[1] != src[1] {
			t.Errorf("%v: EncodeF64/DecodeF64 %v -> %v", d, src, back)
		}
	}
	if got := I8.Decode(0xff); got != -1 {
		t.Errorf("I8.Decode(0xff) = %g", got)
	}
}

// TestEncodeF64DoubleRounding checks that EncodeF64 rounds through float32
// as PyTorch does: 1 + 2^-8 + 2^-40 becomes the bf16 tie 1 + 2^-8 in
// float32, which rounds to even (1), not up as a direct rounding would.
func TestEncodeF64DoubleRounding(t *testing.T) {
	x := 1 + 0x1p-8 + 0x1p-40
	cases := []struct {
		d    DType
		x    float64
		want float64
	}{
		{BF16, x, 1},
		{BF16, -x, -1},
		{F16, 1 + 0x1p-11 + 0x1p-40, 1},
		{E4M3FN, 1 + 0x1p-4 + 0x1p-40, 1},
		{F32, 1 + 0x1p-24 + 0x1p-60, 1},
		{F64, x, x},
	}
	for _, c := range cases {
		dst := make([]byte, c.d.StorageBytes(1))
		EncodeF64(c.d, dst, []float64{c.x}, false)
		back := make([]float64, 1)
		DecodeF64(c.d, back, dst)
		if back[0] != c.want {
			t.Errorf("EncodeF64(%v, %v) decodes to %v, want %v", c.d, c.x, back[0], c.want)
		}
	}
	// Saturation applies in float64 for F64 and after narrowing otherwise.
	dst := make([]byte, 8)
	EncodeF64(F64, dst, []float64{math.Inf(-1)}, true)
	if got := math.Float64frombits(le.Uint64(dst)); got != -math.MaxFloat64 {
		t.Errorf("EncodeF64(F64, -Inf, sat) = %g", got)
	}
	EncodeF64(E5M2, dst[:1], []float64{1e300}, true)
	if dst[0] != 0x7b {
		t.Errorf("EncodeF64(E5M2, 1e300, sat) = %#x, want 0x7b", dst[0])
	}
}

// TestBulkChunks runs the float64 paths over more than one staging chunk,
// with an odd count for E2M1.
func TestBulkChunks(t *testing.T) {
	const n = 2*chunk + 3
	src := make([]float64, n)
	for i := range src {
		src[i] = float64(i%13) - 6
	}
	for _, d := range all {
		dst := make([]byte, d.StorageBytes(n))
		EncodeF64(d, dst, src, false)
		back := make([]float64, n)
		DecodeF64(d, back, dst)
		f32 := make([]float32, n)
		Decode(d, f32, dst)
		for i := range src {
			want := float64(d.Round(float32(src[i])))
			if !same(back[i], want) || !same(float64(f32[i]), want) {
				t.Fatalf("%v[%d]: %g round-trips to %g (float32 %g), want %g", d, i, src[i], back[i], f32[i], want)
			}
		}
	}
}

// same reports whether a and b are equal or both NaN.
func same(a, b float64) bool { return a == b || a != a && b != b }

func TestRoundF64AndF32(t *testing.T) {
	x := float32(1.2345678)
	if F64.Round(x) != x || F32.Round(x) != x || F32.RoundSat(float32(math.Inf(1))) != math.MaxFloat32 {
		t.Error("F64/F32 rounding is not the identity")
	}
	if got := BF16.Round(1.00390625); got != 1 { // tie: 1 + 2^-8
		t.Errorf("BF16.Round(1+2^-8) = %g, want 1", got)
	}
}

func TestPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"short dst":     func() { Encode(BF16, make([]byte, 3), make([]float32, 2), false) },
		"short src":     func() { Decode(E2M1, make([]float32, 3), make([]byte, 1)) },
		"invalid":       func() { Encode(Invalid, nil, nil, false) },
		"scalar F64":    func() { F64.Encode(1, false) },
		"scalar I64":    func() { I64.Decode(1) },
		"short f64 dst": func() { EncodeF64(F32, make([]byte, 7), make([]float64, 2), false) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/vec"
)

// epilogueShapes add, to the direct, serial and k == 0 paths of shapes,
// products split between goroutines by rows and by columns, with C wider
// than ncMax and k longer than two k steps of bfloat16 pairs.
var epilogueShapes = append(slices.Clip(shapes), shape{300, 200, 600}, shape{40, ncMax + 70, 300}, shape{100, 70, 4*kcMax + 9})

// TestEpilogue checks that F32Epilogue and DgemmEpilogue give, bit for bit,
// what the product followed by separate passes gives: the bias added to
// each row in float32 (float64), then the rows rounded into Out. It runs
// float32 and bfloat16-pair operands through every output format, under
// GOMAXPROCS 3 so that large products split unevenly, and checks that
// nothing is written past C's rows or Out's m·n elements.
func TestEpilogue(t *testing.T) { forEachImpl(t, testEpilogue) }

func testEpilogue(t *testing.T, _ *impl) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	rng := rand.New(rand.NewPCG(7, 8))
	outs := []dtype.DType{dtype.Invalid, dtype.F32, dtype.BF16, dtype.F16, dtype.E4M3FN}
	for _, s := range epilogueShapes {
		for _, operands := range []dtype.DType{dtype.F32, dtype.BF16} {
			ta := rng.IntN(2) == 0
			am, _ := encode(newMat(rng, s.m, s.k, ta, 1), operands, 0, false)
			bm, _ := encode(newMat(rng, s.k, s.n, true, 2), operands, 0, false)
			bias := to32(newMat(rng, 1, s.n, false, 0).v)
			for _, od := range outs {
				for _, withBias := range []bool{false, true} {
					for _, withGELU := range []bool{false, true} {
						name := fmt.Sprintf("%dx%dx%d/%v/ta=%v/out=%v/bias=%v/gelu=%v", s.m, s.n, s.k, operands, ta, od, withBias, withGELU)
						var b []float32
						if withBias {
							b = bias
						}
						checkEpilogue(t, name, rng, s, am, bm, b, od, withGELU)
					}
				}
			}
		}
	}
}

// checkEpilogue runs F32Epilogue and compares it with F32 followed by the
// passes the epilogue replaces.
func checkEpilogue(t *testing.T, name string, rng *rand.Rand, s shape, am, bm Matrix, bias []float32, od dtype.DType, withGELU bool) {
	t.Helper()
	c64, ldc := newC(rng, s.m, s.n, 0) // all NaN: beta 0 must not read it
	want, got := to32(c64), to32(c64)
	F32(s.m, s.n, s.k, am, bm, 0, want, ldc)
	ep := Epilogue[float32]{Bias: bias}
	if bias != nil {
		for i := range s.m {
			for j := range s.n {
				want[i*ldc+j] += bias[j]
			}
		}
	}
	var wantOut []byte
	if od != dtype.Invalid {
		ep.OutDType = od
		ep.Out = guarded(od.StorageBytes(s.m*s.n) + 8)
		wantOut = guarded(len(ep.Out))
		for i := range s.m {
			dtype.Encode(od, wantOut[od.StorageBytes(i*s.n):], want[i*ldc:][:s.n], false)
		}
	}
	var wantY []byte
	if withGELU {
		// What a separate GELU computes from the rounded output.
		ydt, x := od, make([]float32, s.m*s.n)
		if od == dtype.Invalid {
			ydt = dtype.F32
			for i := range s.m {
				copy(x[i*s.n:], want[i*ldc:][:s.n])
			}
		} else {
			dtype.Decode(od, x, wantOut)
		}
		y := make([]float32, len(x))
		vec.GELU(y, make([]float32, len(x)), x)
		wantY = guarded(ydt.StorageBytes(len(y)) + 8)
		dtype.Encode(ydt, wantY, y, false)
		ep.GELU = guarded(len(wantY))
		defer func() {
			if !slices.Equal(ep.GELU, wantY) {
				t.Fatalf("%s: the GELU differs from a separate GELU's (or its guard bytes were written)", name)
			}
		}()
	}
	F32Epilogue(s.m, s.n, s.k, am, bm, got, ldc, ep)
	if !withGELU || od == dtype.Invalid { // a GELU with Out leaves C as scratch
		sameC(t, name, got, want)
	}
	if !slices.Equal(ep.Out, wantOut) {
		t.Fatalf("%s: Out differs from the rounded rows (or its guard bytes were written)", name)
	}
}

// TestEpilogueRound checks that Round leaves in C, bit for bit, the sums
// plus the bias rounded into the dtype and widened back, for every
// low-precision float format, on the shapes and splits of TestEpilogue.
func TestEpilogueRound(t *testing.T) { forEachImpl(t, testEpilogueRound) }

func testEpilogueRound(t *testing.T, _ *impl) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	rng := rand.New(rand.NewPCG(11, 12))
	for _, s := range epilogueShapes {
		for _, operands := range []dtype.DType{dtype.F32, dtype.BF16} {
			am, _ := encode(newMat(rng, s.m, s.k, rng.IntN(2) == 0, 1), operands, 0, false)
			bm, _ := encode(newMat(rng, s.k, s.n, true, 2), operands, 0, false)
			bias := to32(newMat(rng, 1, s.n, false, 0).v)
			for _, rd := range []dtype.DType{dtype.BF16, dtype.F16, dtype.E4M3FN, dtype.E5M2} {
				for _, b := range [][]float32{nil, bias} {
					c64, ldc := newC(rng, s.m, s.n, 0) // all NaN: beta 0 must not read it
					want, got := to32(c64), to32(c64)
					F32Epilogue(s.m, s.n, s.k, am, bm, want, ldc, Epilogue[float32]{Bias: b})
					enc := make([]byte, rd.StorageBytes(s.n))
					for i := range s.m {
						row := want[i*ldc:][:s.n]
						dtype.Encode(rd, enc, row, false)
						dtype.Decode(rd, row, enc)
					}
					F32Epilogue(s.m, s.n, s.k, am, bm, got, ldc, Epilogue[float32]{Bias: b, Round: rd})
					sameC(t, fmt.Sprintf("%dx%dx%d/%v/round=%v/bias=%v", s.m, s.n, s.k, operands, rd, b != nil), got, want)
				}
			}
		}
	}
}

// guarded returns n bytes of 0xa5, a pattern no round of these sums gives
// in every byte.
func guarded(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 0xa5
	}
	return b
}

func sameC(t *testing.T, name string, got, want []float32) {
	t.Helper()
	for i := range got {
		if g, w := got[i], want[i]; math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
			t.Fatalf("%s: C[%d] = %v, want %v", name, i, g, w)
		}
	}
}

func TestDgemmEpilogue(t *testing.T) { forEachImpl(t, testDgemmEpilogue) }

func testDgemmEpilogue(t *testing.T, _ *impl) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	rng := rand.New(rand.NewPCG(9, 10))
	for _, s := range epilogueShapes {
		a, b := newMat(rng, s.m, s.k, false, 1), newMat(rng, s.k, s.n, true, 1)
		bias := newMat(rng, 1, s.n, false, 0).v
		for _, od := range []dtype.DType{dtype.Invalid, dtype.BF16} {
			name := fmt.Sprintf("%dx%dx%d/out=%v", s.m, s.n, s.k, od)
			want, ldc := newC(rng, s.m, s.n, 0)
			got := slices.Clone(want)
			Dgemm(false, true, s.m, s.n, s.k, a.v, a.ld, b.v, b.ld, 0, want, ldc)
			ep := Epilogue[float64]{Bias: bias}
			var wantOut []byte
			for i := range s.m {
				for j := range s.n {
					want[i*ldc+j] += bias[j]
				}
			}
			if od != dtype.Invalid {
				ep.OutDType, ep.Out, wantOut = od, guarded(od.StorageBytes(s.m*s.n)+8), guarded(od.StorageBytes(s.m*s.n)+8)
				for i := range s.m {
					dtype.EncodeF64(od, wantOut[od.StorageBytes(i*s.n):], want[i*ldc:][:s.n], false)
				}
			}
			DgemmEpilogue(false, true, s.m, s.n, s.k, a.v, a.ld, b.v, b.ld, 0, got, ldc, ep)
			for i := range got {
				if g, w := got[i], want[i]; math.Float64bits(g) != math.Float64bits(w) && !(g != g && w != w) {
					t.Fatalf("%s: C[%d] = %v, want %v", name, i, g, w)
				}
			}
			if !slices.Equal(ep.Out, wantOut) {
				t.Fatalf("%s: Out differs from the rounded rows (or its guard bytes were written)", name)
			}
		}
	}
}

package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"unsafe"

	"github.com/weftml/weft/dtype"
)

type shape struct{ m, n, k int }

// shapes covers degenerate sizes, sizes that are and are not multiples of
// the tiles (4×2, 6×16, 12×32...) or of the blocks (mcMax, kcMax, ncMax),
// and sizes large enough to run in parallel.
var shapes = []shape{
	{1, 1, 1}, {1, 1, 9}, {2, 3, 4}, {4, 2, 8}, {5, 3, 7}, {7, 9, 1},
	{16, 16, 16}, {17, 15, 33}, {33, 31, 17}, {64, 64, 64}, {65, 67, 129},
	{12, 32, 5}, {13, 33, 4}, {24, 64, 3}, {35, 97, 6}, {6, 16, 2},
	{3, ncMax + 3, 5}, {mcMax + 1, 9, kcMax + 44}, {mcMax + 5, 33, kcMax + 1},
	{1, 300, 2*kcMax + 1}, {2*mcMax + 1, 1, 3}, {70, 90, 260}, {2, 3, kcMax + 5}, {1, 1, 2*kcMax + 3},
	{0, 5, 5}, {5, 0, 5}, {5, 5, 0}, {0, 0, 0},
}

// dtypeShapes are the shapes for each operand format: what the formats add
// is decoding row segments at any offset, including past kcMax and in the
// parts of a parallel call.
var dtypeShapes = []shape{
	{1, 1, 1}, {5, 3, 7}, {17, 15, 33}, {33, 31, 17}, {3, 40, kcMax + 3}, {9, 6, 2*kcMax + 1}, {5, 5, 0},
	{70, 41, 100}, {37, 80, 90},
}

var betas = []float64{0, 1, 0.5}

// mat is a stored row-major matrix in float64 (exact for every float32) with
// its leading dimension, and the transposition that op applies.
type mat struct {
	v     []float64
	ld    int
	trans bool
}

// at returns element (i, j) of op(x).
func (x mat) at(i, j int) float64 {
	if x.trans {
		i, j = j, i
	}
	return x.v[i*x.ld+j]
}

// newMat returns a random rows×cols op(x) stored with trans and a leading
// dimension pad elements wider than a stored row.
func newMat(rng *rand.Rand, rows, cols int, trans bool, pad int) mat {
	sr, sc := rows, cols
	if trans {
		sr, sc = cols, rows
	}
	x := mat{ld: sc + pad, trans: trans}
	x.v = make([]float64, max(0, (sr-1)*x.ld+sc))
	for i := range x.v {
		x.v[i] = float64(float32(2*rng.Float64() - 1))
	}
	return x
}

// naive returns op(A)·op(B) + beta·C in float64 with the bound on the
// rounding error of any summation order: Σ|a·b| + |beta·c| for each element.
func naive(m, n, k int, a, b mat, beta float64, c []float64, ldc int) (want, bound []float64) {
	want, bound = make([]float64, m*n), make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s, t float64
			if beta != 0 {
				s, t = beta*c[i*ldc+j], math.Abs(beta*c[i*ldc+j])
			}
			for p := range k {
				x := a.at(i, p) * b.at(p, j)
				s += x
				t += math.Abs(x)
			}
			want[i*n+j], bound[i*n+j] = s, t
		}
	}
	return want, bound
}

// newC returns C with leading dimension n+2 and one spare row, random where
// beta reads it, NaN where the call must not read it (beta == 0) and in the
// guard bands it must never touch.
func newC(rng *rand.Rand, m, n int, beta float64) ([]float64, int) {
	ldc := n + 2
	c := make([]float64, (m+1)*ldc)
	for i := range c {
		c[i] = math.NaN()
		if i < m*ldc && i%ldc < n && beta != 0 {
			c[i] = float64(float32(2*rng.Float64() - 1))
		}
	}
	return c, ldc
}

// check compares got with the naive result: each element must lie within
// tol·bound of it, and the guard bands of C must still hold NaN.
func check(t *testing.T, name string, m, n, ldc int, got, want, bound []float64, tol float64) {
	t.Helper()
	for i := range got {
		r, j := i/ldc, i%ldc
		if r >= m || j >= n {
			if !math.IsNaN(got[i]) {
				t.Fatalf("%s: guard C[%d][%d] = %v, want untouched NaN", name, r, j, got[i])
			}
			continue
		}
		w, b := want[r*n+j], bound[r*n+j]
		if d := math.Abs(got[i] - w); !(d <= tol*b) {
			t.Fatalf("%s: C[%d][%d] = %v, want %v (error %.3g of bound %.3g)", name, r, j, got[i], w, d/b, b)
		}
	}
}

// tol32 is the relative error allowed in float32 results: k+2 roundings
// (the products, the sum and beta·c), each at most 2⁻²⁴.
func tol32(k int) float64 { return float64(k+2) * 0x1p-24 }

func to32(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

func to64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// forCases runs f on each of shapes with every transposition and beta.
func forCases(t *testing.T, shapes []shape, f func(t *testing.T, name string, rng *rand.Rand, s shape, ta, tb bool, beta float64)) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range shapes {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for _, beta := range betas {
					name := fmt.Sprintf("%dx%dx%d/ta=%v/tb=%v/beta=%v", s.m, s.n, s.k, ta, tb, beta)
					f(t, name, rng, s, ta, tb, beta)
				}
			}
		}
	}
}

// forEachImpl runs f as a subtest for each of impls, with its kernels in use.
func forEachImpl(t *testing.T, f func(t *testing.T, im *impl)) {
	defer use(&impls[0])
	for i := range impls {
		im := &impls[i]
		use(im)
		t.Run(im.name, func(t *testing.T) { f(t, im) })
	}
}

func TestSgemm(t *testing.T) { forEachImpl(t, testSgemm) }

func testSgemm(t *testing.T, _ *impl) {
	forCases(t, shapes, func(t *testing.T, name string, rng *rand.Rand, s shape, ta, tb bool, beta float64) {
		a, b := newMat(rng, s.m, s.k, ta, 3), newMat(rng, s.k, s.n, tb, 1)
		c, ldc := newC(rng, s.m, s.n, beta)
		want, bound := naive(s.m, s.n, s.k, a, b, beta, c, ldc)
		c32 := to32(c)
		Sgemm(ta, tb, s.m, s.n, s.k, to32(a.v), a.ld, to32(b.v), b.ld, float32(beta), c32, ldc)
		check(t, name, s.m, s.n, ldc, to64(c32), want, bound, tol32(s.k))
	})
}

func TestDgemm(t *testing.T) { forEachImpl(t, testDgemm) }

func testDgemm(t *testing.T, _ *impl) {
	forCases(t, shapes, func(t *testing.T, name string, rng *rand.Rand, s shape, ta, tb bool, beta float64) {
		a, b := newMat(rng, s.m, s.k, ta, 2), newMat(rng, s.k, s.n, tb, 5)
		for _, x := range [][]float64{a.v, b.v} { // use all 53 bits
			for i := range x {
				x[i] += 0x1p-30 * (2*rng.Float64() - 1)
			}
		}
		c, ldc := newC(rng, s.m, s.n, beta)
		want, bound := naive(s.m, s.n, s.k, a, b, beta, c, ldc)
		Dgemm(ta, tb, s.m, s.n, s.k, a.v, a.ld, b.v, b.ld, beta, c, ldc)
		check(t, name, s.m, s.n, ldc, c, want, bound, 1e-13)
	})
}

// encode stores x in format d and returns it as a Matrix with the given
// Scale, with op(x) as F32 must see it: decoded, then multiplied by the
// scale in float32. F32 data starts one byte into its buffer when misalign
// is set, which F32 cannot view in place.
func encode(x mat, d dtype.DType, scale float32, misalign bool) (Matrix, mat) {
	src := make([]float32, len(x.v))
	for i, v := range x.v {
		src[i] = float32(v)
	}
	buf := make([]byte, d.StorageBytes(len(src))+1)
	data := buf[:len(buf)-1]
	if misalign {
		data = buf[1:]
	}
	dtype.Encode(d, data, src, true)
	dec := make([]float32, len(src))
	dtype.Decode(d, dec, data)
	s := scale
	if s == 0 {
		s = 1
	}
	y := mat{v: make([]float64, len(dec)), ld: x.ld, trans: x.trans}
	for i, v := range dec {
		y.v[i] = float64(v * s)
	}
	return Matrix{DType: d, Data: data, LD: x.ld, Trans: x.trans, Scale: scale}, y
}

func TestF32DTypes(t *testing.T) { forEachImpl(t, testF32DTypes) }

func testF32DTypes(t *testing.T, _ *impl) {
	type operands struct {
		d        dtype.DType
		scale    float32
		misalign bool
		both     bool // both operands in d, not one of them
	}
	var cases []operands
	for _, d := range []dtype.DType{dtype.F32, dtype.BF16, dtype.F16, dtype.E4M3FN, dtype.E5M2, dtype.E2M1} {
		for _, scale := range []float32{0, 0.37, 6} {
			cases = append(cases, operands{d, scale, false, false})
		}
	}
	cases = append(cases, operands{dtype.F32, 0, true, false}, operands{dtype.F32, 0.37, true, false},
		// Unscaled BF16 operands are multiplied as pairs where the CPU can.
		operands{dtype.BF16, 0, false, true}, operands{dtype.BF16, 1, true, true}, operands{dtype.BF16, 0.37, false, true})
	for _, oc := range cases {
		forCases(t, dtypeShapes, func(t *testing.T, name string, rng *rand.Rand, s shape, ta, tb bool, beta float64) {
			name = fmt.Sprintf("%v/scale=%v/misalign=%v/both=%v/%s", oc.d, oc.scale, oc.misalign, oc.both, name)
			other, oscale := dtype.F32, float32(0)
			if oc.both {
				other, oscale = oc.d, oc.scale
			}
			// Odd leading dimensions start E2M1 rows at a high nibble.
			am, a := encode(newMat(rng, s.m, s.k, ta, 1), oc.d, oc.scale, oc.misalign)
			bm, b := encode(newMat(rng, s.k, s.n, tb, 2), other, oscale, false)
			if s.k%2 == 1 { // alternate which operand is encoded
				am, a = encode(newMat(rng, s.m, s.k, ta, 2), other, oscale, false)
				bm, b = encode(newMat(rng, s.k, s.n, tb, 1), oc.d, oc.scale, oc.misalign)
			}
			c, ldc := newC(rng, s.m, s.n, beta)
			want, bound := naive(s.m, s.n, s.k, a, b, beta, c, ldc)
			c32 := to32(c)
			F32(s.m, s.n, s.k, am, bm, float32(beta), c32, ldc)
			check(t, name, s.m, s.n, ldc, to64(c32), want, bound, tol32(s.k))
		})
	}
}

// codes returns x stored as random 4-bit codes of cb in blocks of bs
// elements with random scales, and op(x) as F32 must see it.
func codes(rng *rand.Rand, x mat, cb *[16]float32, bs int, scale float32) (Matrix, mat) {
	n := len(x.v)
	m := Matrix{Data: make([]byte, (n+1)/2), LD: x.ld, Trans: x.trans, Scale: scale, Codebook: cb,
		Absmax: make([]float32, (n+bs-1)/bs), BlockSize: bs}
	for i := range m.Data {
		m.Data[i] = byte(rng.Uint32())
	}
	for i := range m.Absmax {
		m.Absmax[i] = float32(rng.Float64() + 0.5)
	}
	if scale == 0 {
		scale = 1
	}
	y := mat{v: make([]float64, n), ld: x.ld, trans: x.trans}
	for e := range y.v {
		c := m.Data[e/2] >> (4 - 4*(e&1)) & 15
		y.v[e] = float64(cb[c] * (m.Absmax[e/bs] * scale))
	}
	return m, y
}

func TestF32Codebook(t *testing.T) { forEachImpl(t, testF32Codebook) }

func testF32Codebook(t *testing.T, _ *impl) {
	var cb [16]float32
	for c := range cb {
		cb[c] = float32(c)/7.5 - 1
	}
	for _, bs := range []int{64, 7} {
		for _, scale := range []float32{0, 0.37} {
			forCases(t, dtypeShapes, func(t *testing.T, name string, rng *rand.Rand, s shape, ta, tb bool, beta float64) {
				name = fmt.Sprintf("block=%d/scale=%v/%s", bs, scale, name)
				// Odd leading dimensions start rows at a low nibble.
				am, a := codes(rng, newMat(rng, s.m, s.k, ta, 1), &cb, bs, scale)
				bm, b := encode(newMat(rng, s.k, s.n, tb, 2), dtype.F32, 0, false)
				if s.k%2 == 1 { // alternate which operand is coded
					am, a = encode(newMat(rng, s.m, s.k, ta, 2), dtype.F32, 0, false)
					bm, b = codes(rng, newMat(rng, s.k, s.n, tb, 1), &cb, bs, scale)
				}
				c, ldc := newC(rng, s.m, s.n, beta)
				want, bound := naive(s.m, s.n, s.k, a, b, beta, c, ldc)
				c32 := to32(c)
				F32(s.m, s.n, s.k, am, bm, float32(beta), c32, ldc)
				check(t, name, s.m, s.n, ldc, to64(c32), want, bound, tol32(s.k))
			})
		}
	}
}

// TestDeterminism checks that results are bitwise the same whatever
// GOMAXPROCS is, including counts that cut C into uneven parts.
func TestDeterminism(t *testing.T) { forEachImpl(t, testDeterminism) }

func testDeterminism(t *testing.T, _ *impl) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	rng := rand.New(rand.NewPCG(3, 4))
	for _, s := range []shape{{mcMax + 3, 40, kcMax + 7}, {60, 150, 2*kcMax + 9}, {20, ncMax + 5, 9}} {
		for _, ta := range []bool{false, true} {
			a, b := newMat(rng, s.m, s.k, ta, 1), newMat(rng, s.k, s.n, !ta, 0)
			a32, b32 := to32(a.v), to32(b.v)
			am, _ := encode(a, dtype.BF16, 0.5, false)
			ab, _ := encode(a, dtype.BF16, 0, false)
			bb, _ := encode(b, dtype.BF16, 0, false)
			c0, ldc := newC(rng, s.m, s.n, 1)
			var first [3][]float32
			for _, procs := range []int{1, 2, 3, 7} {
				runtime.GOMAXPROCS(procs)
				c := to32(c0)
				Sgemm(ta, !ta, s.m, s.n, s.k, a32, a.ld, b32, b.ld, 0.5, c, ldc)
				cq := to32(c0)
				F32(s.m, s.n, s.k, am, Matrix{DType: dtype.F32, Data: bytesOf(b32), LD: b.ld, Trans: !ta}, 1, cq, ldc)
				cb := to32(c0)
				F32(s.m, s.n, s.k, ab, bb, 1, cb, ldc)
				for i, got := range [][]float32{c, cq, cb} {
					if first[i] == nil {
						first[i] = got
						continue
					}
					for j := range got {
						if math.Float32bits(got[j]) != math.Float32bits(first[i][j]) {
							t.Fatalf("%v ta=%v call %d: GOMAXPROCS=%d gives C[%d] = %v, GOMAXPROCS=1 gives %v",
								s, ta, i, procs, j, got[j], first[i][j])
						}
					}
				}
			}
		}
	}
}

// TestPathsAgree checks that small products computed without packing equal
// the packed results bit for bit: F32 packs misaligned float32 data.
func TestPathsAgree(t *testing.T) { forEachImpl(t, testPathsAgree) }

func testPathsAgree(t *testing.T, _ *impl) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, s := range []shape{{5, 3, 7}, {16, 16, 16}, {17, 15, 33}, {40, 50, 60}} {
		for _, ta := range []bool{false, true} {
			a, b := newMat(rng, s.m, s.k, ta, 1), newMat(rng, s.k, s.n, !ta, 2)
			c0, ldc := newC(rng, s.m, s.n, 1)
			direct, packed := to32(c0), to32(c0)
			Sgemm(ta, !ta, s.m, s.n, s.k, to32(a.v), a.ld, to32(b.v), b.ld, 0.5, direct, ldc)
			am, _ := encode(a, dtype.F32, 0, true)
			bm, _ := encode(b, dtype.F32, 0, true)
			F32(s.m, s.n, s.k, am, bm, 0.5, packed, ldc)
			for i := range direct {
				if math.Float32bits(direct[i]) != math.Float32bits(packed[i]) {
					t.Fatalf("%v ta=%v: C[%d] is %v unpacked, %v packed", s, ta, i, direct[i], packed[i])
				}
			}
		}
	}
}

func bytesOf(x []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x))
}

func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	forEachImpl(t, testAllocs)
}

func testAllocs(t *testing.T, _ *impl) {
	for _, n := range []int{16, 200} { // direct and parallel
		a := make([]float32, n*n)
		c := make([]float32, n*n)
		bf := Matrix{DType: dtype.BF16, Data: make([]byte, 2*n*n), LD: n, Trans: true}
		sg := func() { Sgemm(false, true, n, n, n, a, n, a, n, 0, c, n) }
		f32 := func() { F32(n, n, n, Matrix{DType: dtype.F32, Data: bytesOf(a), LD: n}, bf, 1, c, n) }
		bf16 := func() { F32(n, n, n, bf, bf, 1, c, n) }
		out := make([]byte, 2*n*n)
		ep := func() {
			F32Epilogue(n, n, n, bf, bf, c, n, Epilogue[float32]{Bias: a[:n], Out: out, OutDType: dtype.BF16})
		}
		d := make([]float64, n*n)
		dg := func() { Dgemm(true, false, n, n, n, d, n, d, n, 1, d, n) }
		for name, f := range map[string]func(){"Sgemm": sg, "F32": f32, "BF16": bf16, "Epilogue": ep, "Dgemm": dg} {
			if allocs := testing.AllocsPerRun(20, f); allocs != 0 {
				t.Errorf("%s %d³: %v allocations per call, want 0", name, n, allocs)
			}
		}
	}
}

func TestPanics(t *testing.T) {
	x := make([]float32, 12)
	f32x := Matrix{DType: dtype.F32, Data: bytesOf(x), LD: 3}
	for name, f := range map[string]func(){
		"negative m": func() { Sgemm(false, false, -1, 2, 2, x, 2, x, 2, 0, x, 2) },
		"short lda":  func() { Sgemm(false, false, 3, 2, 4, x, 3, x, 2, 0, x, 2) },
		"short A":    func() { Sgemm(true, false, 4, 2, 4, x, 4, x, 2, 0, x, 2) },
		"short C":    func() { Sgemm(false, false, 4, 4, 2, x, 2, x, 4, 0, x, 4) },
		"int dtype":  func() { F32(1, 1, 1, Matrix{DType: dtype.I8, Data: make([]byte, 1), LD: 1}, Matrix{}, 0, x, 1) },
		"short data": func() { F32(2, 2, 2, Matrix{DType: dtype.E2M1, Data: make([]byte, 1), LD: 2}, Matrix{}, 0, x, 2) },
		"short codes": func() {
			F32(2, 2, 2, Matrix{Data: make([]byte, 1), LD: 2, Codebook: new([16]float32), Absmax: x, BlockSize: 4}, Matrix{}, 0, x, 2)
		},
		"short absmax": func() {
			F32(2, 2, 2, Matrix{Data: make([]byte, 2), LD: 2, Codebook: new([16]float32), Absmax: x[:1], BlockSize: 2}, Matrix{}, 0, x, 2)
		},
		"short bias": func() { F32Epilogue(2, 3, 2, f32x, f32x, x, 3, Epilogue[float32]{Bias: x[:2]}) },
		"short out": func() {
			F32Epilogue(2, 2, 2, f32x, f32x, x, 2, Epilogue[float32]{Out: make([]byte, 7), OutDType: dtype.BF16})
		},
		"short GELU": func() {
			F32Epilogue(2, 2, 2, f32x, f32x, x, 2, Epilogue[float32]{GELU: make([]byte, 15)})
		},
		"short rounded GELU": func() {
			F32Epilogue(2, 2, 2, f32x, f32x, x, 2, Epilogue[float32]{Out: make([]byte, 8), OutDType: dtype.BF16, GELU: make([]byte, 7)})
		},
		"float64 GELU": func() {
			DgemmEpilogue(false, false, 1, 1, 1, make([]float64, 1), 1, make([]float64, 1), 1, 0, make([]float64, 1), 1, Epilogue[float64]{GELU: make([]byte, 8)})
		},
		"4-bit out": func() {
			F32Epilogue(2, 2, 2, f32x, f32x, x, 2, Epilogue[float32]{Out: make([]byte, 8), OutDType: dtype.E2M1})
		},
		"codebook dtype": func() {
			F32(1, 1, 1, Matrix{DType: dtype.E2M1, Data: make([]byte, 1), LD: 1, Codebook: new([16]float32), Absmax: x, BlockSize: 1}, Matrix{}, 0, x, 1)
		},
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

func reportGFLOPS(b *testing.B, m, n, k int) {
	b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkKernel measures each float32 micro-kernel alone on packed panels
// that stay in L1.
func BenchmarkKernel(b *testing.B) {
	for _, im := range impls {
		for name, k := range map[string]kernel[float32]{"f32": im.f32, "bf16": im.bf16} {
			if k.fn == nil {
				continue
			}
			b.Run(im.name+"/"+name, func(b *testing.B) {
				a, p, c := make([]float32, k.mr*kcMax), make([]float32, k.nr*kcMax), make([]float32, k.mr*k.nr)
				for b.Loop() {
					k.fn(kcMax, a, p, c, k.nr, k.mr, k.nr, true)
				}
				kk := kcMax
				if name == "bf16" {
					kk *= 2 // a pair per packed value
				}
				reportGFLOPS(b, k.mr, k.nr, kk)
			})
		}
	}
}

func BenchmarkSgemm(b *testing.B) {
	for _, n := range []int{16, 64, 256, 512, 1024} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			x, c := make([]float32, n*n), make([]float32, n*n)
			for i := range x {
				x[i] = float32(i%7) - 3
			}
			for b.Loop() {
				Sgemm(false, false, n, n, n, x, n, x, n, 0, c, n)
			}
			reportGFLOPS(b, n, n, n)
		})
	}
}

func BenchmarkDgemm(b *testing.B) {
	for _, n := range []int{256} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			x, c := make([]float64, n*n), make([]float64, n*n)
			for i := range x {
				x[i] = float64(i%7) - 3
			}
			for b.Loop() {
				Dgemm(false, false, n, n, n, x, n, x, n, 0, c, n)
			}
			reportGFLOPS(b, n, n, n)
		})
	}
}

// BenchmarkF32Weights multiplies float32 activations by the transpose of
// weights stored [out, in] in each format, as a Linear layer does, and
// both operands in BF16 (bf16-both), on each path too.
func BenchmarkF32Weights(b *testing.B) {
	const n = 512
	x, c := make([]float32, n*n), make([]float32, n*n)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	enc := func(d dtype.DType) Matrix {
		w := make([]byte, d.StorageBytes(n*n))
		dtype.Encode(d, w, x, true)
		return Matrix{DType: d, Data: w, LD: n, Trans: true}
	}
	nf4 := Matrix{Data: make([]byte, n*n/2), LD: n, Trans: true, Codebook: new([16]float32),
		Absmax: make([]float32, n*n/64), BlockSize: 64}
	a := Matrix{DType: dtype.F32, Data: bytesOf(x), LD: n}
	bf := enc(dtype.BF16)
	for _, bc := range []struct {
		name string
		a, w Matrix
	}{{"bf16", a, bf}, {"e4m3fn", a, enc(dtype.E4M3FN)}, {"nf4", a, nf4}, {"bf16-both", bf, bf}} {
		b.Run(fmt.Sprintf("%s/%d", bc.name, n), func(b *testing.B) {
			for b.Loop() {
				F32(n, n, n, bc.a, bc.w, 0, c, n)
			}
			reportGFLOPS(b, n, n, n)
		})
	}
	defer SetBF16Path(PathAuto)
	for _, p := range BF16Paths() {
		SetBF16Path(p)
		b.Run(fmt.Sprintf("bf16-both-%s/%d", p, n), func(b *testing.B) {
			for b.Loop() {
				F32(n, n, n, bf, bf, 0, c, n)
			}
			reportGFLOPS(b, n, n, n)
		})
	}
}

package gemm

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/par"
)

// fmaRef is fmaDAZ computed with big.Float: x·y+s exactly, rounded to 24
// bits with an unbounded exponent, and flushed to a zero of its sign if
// below the smallest normal; denormal inputs count as zeros of their sign.
func fmaRef(x, y, s float32) float32 {
	x, y, s = dazRef(x), dazRef(y), dazRef(s)
	if x != x || y != y || s != s || math.IsInf(float64(x), 0) || math.IsInf(float64(y), 0) || math.IsInf(float64(s), 0) {
		return float32(float64(x)*float64(y) + float64(s)) // IEEE's infinities and NaNs
	}
	p := new(big.Float).SetPrec(400).SetFloat64(float64(x) * float64(y)) // exact
	if p.Sign() == 0 {
		return x*y + s // the sign of a zero sum
	}
	z := new(big.Float).SetPrec(400).Add(p, big.NewFloat(float64(s))) // exact at this precision
	if z.Sign() == 0 {
		return 0 // an exact cancellation rounds to +0
	}
	r := new(big.Float).SetPrec(24).Set(z) // to nearest even, exponent unbounded
	if new(big.Float).Abs(r).Cmp(big.NewFloat(0x1p-126)) < 0 {
		return float32(math.Copysign(0, float64(z.Sign())))
	}
	f, _ := r.Float32()
	return f
}

func dazRef(x float32) float32 {
	if x != 0 && math.Abs(float64(x)) < 0x1p-126 {
		return float32(math.Copysign(0, float64(x)))
	}
	return x
}

// bf16Values returns random bfloat16 values as float32 of the kinds the
// tests mix: ordinary ones, tiny ones whose products are denormal (and
// flushed) or underflow, denormal ones (read as zeros), signed zeros, and
// rarely huge ones, infinities and NaNs.
func bf16Values(rng *rand.Rand, special bool) func() float32 {
	return func() float32 {
		sign := float32(2*rng.IntN(2) - 1)
		mant := 1 + float32(rng.IntN(128))/128
		if !special {
			return sign * mant * float32(math.Ldexp(1, rng.IntN(4)-2))
		}
		switch r := rng.IntN(200); {
		case r < 60:
			return sign * mant * float32(math.Ldexp(1, -58-rng.IntN(16)))
		case r < 80:
			return sign * float32(rng.IntN(128)) * 0x1p-133 // denormal or zero
		case r < 90:
			return sign * 0
		case r < 93:
			return sign * mant * 0x1p100
		case r < 94:
			return sign * float32(math.Inf(1))
		case r < 95:
			return math.Float32frombits(0x7fc00000 | uint32(rng.IntN(128))<<16)
		}
		return sign * mant * float32(math.Ldexp(1, rng.IntN(4)-2))
	}
}

// bf16Mat is a stored bfloat16 matrix and the op that uses it.
type bf16Mat struct {
	m     Matrix
	v     []float32 // the stored values
	trans bool
}

func newBF16Mat(rows, cols int, trans bool, pad int, val func() float32) bf16Mat {
	sr, sc := stored(rows, cols, trans)
	x := bf16Mat{v: make([]float32, max(0, (sr-1)*(sc+pad)+sc)), trans: trans}
	data := make([]byte, 2*len(x.v)+2) // a spare element after the last
	for i := range x.v {
		h := dtype.BF16FromF32(val())
		binary.LittleEndian.PutUint16(data[2*i:], h)
		x.v[i] = math.Float32frombits(uint32(h) << 16)
	}
	binary.LittleEndian.PutUint16(data[2*len(x.v):], 0x7fc1) // a NaN nothing may read
	x.m = Matrix{DType: dtype.BF16, Data: data[:2*len(x.v)], LD: sc + pad, Trans: trans}
	return x
}

func (x bf16Mat) at(i, j int) float32 {
	if x.trans {
		i, j = j, i
	}
	return x.v[i*x.m.LD+j]
}

// refBF16 returns op(A)·op(B) + beta·C for bfloat16 operands in the order
// VDPBF16PS defines: C is scaled by beta first (set to +0 if beta is 0);
// each k step of 2·kcMax elements sums from +0, fmaDAZ by fmaDAZ, the
// product of elements 2q+1 and then that of elements 2q for each pair q
// (an odd k pads the last pair with +0·+0), and is added to C, or stored
// in it for the first k step with beta 0.
func refBF16(m, n, k int, a, b bf16Mat, beta float32, c []float32, ldc int) []float32 {
	want := slices.Clone(c)
	for i := range m {
		for j := range n {
			e := &want[i*ldc+j]
			switch beta {
			case 0:
				*e = 0
			case 1:
			default:
				*e *= beta
			}
			for p0 := 0; p0 < k; p0 += 2 * kcMax {
				var s float32
				for q := p0; q < min(p0+2*kcMax, k); q += 2 {
					var x, y float32
					if q+1 < k {
						x, y = a.at(i, q+1), b.at(q+1, j)
					}
					s = fmaDAZ(x, y, s)
					s = fmaDAZ(a.at(i, q), b.at(q, j), s)
				}
				if p0 == 0 && beta == 0 {
					*e = s
				} else {
					*e += s
				}
			}
		}
	}
	return want
}

// sameBits reports whether x and y are the same float32, any NaN matching
// any other (which NaN comes out where several meet differs by path).
func sameBits(x, y float32) bool {
	return math.Float32bits(x) == math.Float32bits(y) || x != x && y != y
}

// TestFmaDAZ checks fmaDAZ, the step of the bfloat16 reference and of the
// Go kernel, against fmaRef: products of random bfloat16 values of every
// kind with sums that fall anywhere, those near the smallest normal most.
func TestFmaDAZ(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	val := bf16Values(rng, true)
	bf := func(v float32) float32 { return math.Float32frombits(uint32(dtype.BF16FromF32(v)) << 16) }
	for i := range 200000 {
		x, y := bf(val()), bf(val())
		s := float32(-x * y) // cancels, near the smallest normal if x·y is
		switch i % 4 {
		case 1:
			s = math.Float32frombits(math.Float32bits(s) + uint32(rng.IntN(5)) - 2)
		case 2:
			s = float32(math.Copysign(0x1p-126, float64(2*rng.IntN(2)-1))) * (1 + float32(rng.IntN(4)))
		case 3:
			s = math.Float32frombits(rng.Uint32())
		}
		if got, want := fmaDAZ(x, y, s), fmaRef(x, y, s); !sameBits(got, want) {
			t.Fatalf("fmaDAZ(%g, %g, %g) = %g (%#x), want %g (%#x)", x, y, s, got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
}

// forEachBF16Path runs f as a subtest for each impl and each of its paths
// for two bfloat16 operands.
func forEachBF16Path(t *testing.T, f func(t *testing.T)) {
	defer SetBF16Path(PathAuto)
	forEachImpl(t, func(t *testing.T, _ *impl) {
		for _, p := range BF16Paths() {
			if err := SetBF16Path(p); err != nil {
				t.Fatal(err)
			}
			if got := BF16Path(); got != p {
				t.Fatalf("BF16Path() = %s after SetBF16Path(%s)", got, p)
			}
			t.Run(p, f)
		}
	})
}

// TestBF16 checks F32 of two bfloat16 operands on every path bit for bit
// against refBF16, on every shape (odd k, ragged tiles, several k steps,
// parallel splits), with ordinary values and with a mix of tiny, denormal,
// zero, huge, infinite and NaN ones, and with C surrounded by NaN guards.
func TestBF16(t *testing.T) {
	forEachBF16Path(t, func(t *testing.T) {
		for _, special := range []bool{false, true} {
			forCases(t, shapes, func(t *testing.T, name string, rng *rand.Rand, s shape, ta, tb bool, beta float64) {
				val := bf16Values(rng, special)
				a, b := newBF16Mat(s.m, s.k, ta, 3, val), newBF16Mat(s.k, s.n, tb, 1, val)
				c64, ldc := newC(rng, s.m, s.n, beta)
				c := to32(c64)
				want := refBF16(s.m, s.n, s.k, a, b, float32(beta), c, ldc)
				F32(s.m, s.n, s.k, a.m, b.m, float32(beta), c, ldc)
				for i := range c {
					if !sameBits(c[i], want[i]) {
						t.Fatalf("special=%v/%s: C[%d][%d] = %g (%#x), want %g (%#x)", special, name, i/ldc, i%ldc,
							c[i], math.Float32bits(c[i]), want[i], math.Float32bits(want[i]))
					}
				}
			})
		}
	})
}

// TestBF16Corners checks, on every path, single products whose bits tell
// the defined order and denormal handling from the alternatives (fusing
// a pair, the even product first, tininess before rounding, IEEE
// denormals, no padding), with the results worked out by hand.
func TestBF16Corners(t *testing.T) {
	negz := float32(math.Copysign(0, -1))
	cases := []struct {
		name string
		a, b []float32 // op(A)'s one row and op(B)'s one column: k elements
		want float32
	}{
		// 1, then 1.5·2⁻²⁴ (to 1+2⁻²³), then 2⁻²⁴ (a tie, to even): 1+2⁻²².
		{"odd product first, each rounded", []float32{1, 0, 0x1p-24, 1.5 * 0x1p-24}, []float32{1, 0, 1, 1}, 1 + 0x1p-22},
		// 2⁻¹²⁶ − (2⁻¹⁵¹+2⁻¹⁵⁸+…) rounds to 2⁻¹²⁶−2⁻¹⁵⁰ in 24 bits: tiny, so +0.
		{"tininess after rounding", []float32{-(1 + 0x1p-7) * 0x1p-75, 0x1p-63}, []float32{(1 + 0x1p-8) * 0x1p-76, 0x1p-63}, 0},
		// 2⁻¹²⁶ − 2⁻¹⁶⁰ rounds to 2⁻¹²⁶ in 24 bits: not tiny.
		{"not tiny once rounded", []float32{-0x1p-80, 0x1p-63}, []float32{0x1p-80, 0x1p-63}, 0x1p-126},
		// −2⁻¹⁴⁰ is flushed to −0, and −0·+0 keeps it −0.
		{"flushed to a signed zero", []float32{negz, -0x1p-70}, []float32{0, 0x1p-70}, negz},
		// −2⁻¹⁴⁰ flushed to −0, then a denormal read as −0: −0.
		{"denormal input as a signed zero", []float32{-0x1p-133, -0x1p-70}, []float32{0x1p100, 0x1p-70}, negz},
		// A denormal times 2¹⁰⁰ would be 2⁻³³; read as 0 it adds nothing.
		{"denormal input", []float32{0, 0x1p-133}, []float32{0, 0x1p100}, 0},
		// −1.5·2¹²⁷ + 2¹²⁸ = 2¹²⁶: fused, 2¹²⁸ need not be a float32.
		{"no overflow inside a step", []float32{0, -0x1p127, 0, 0x1p64}, []float32{0, 1.5, 0, 0x1p64}, 0x1p126},
		// −0 after the first pair; the odd k's padding adds +0·+0 (+0),
		// then −0·+0 adds −0 to +0.
		{"padding of an odd k", []float32{negz, -0x1p-70, negz}, []float32{0, 0x1p-70, 0}, 0},
	}
	forEachBF16Path(t, func(t *testing.T) {
		for _, tc := range cases {
			k := len(tc.a)
			next := func(x []float32) func() float32 {
				i := -1
				return func() float32 { i++; return x[i] }
			}
			a, b := newBF16Mat(1, k, false, 0, next(tc.a)), newBF16Mat(k, 1, true, 0, next(tc.b))
			c := []float32{float32(math.NaN())}
			F32(1, 1, k, a.m, b.m, 0, c, 1)
			if !sameBits(c[0], tc.want) {
				t.Errorf("%s: %g (%#x), want %g (%#x)", tc.name, c[0], math.Float32bits(c[0]), tc.want, math.Float32bits(tc.want))
			}
		}
	})
}

// TestSplits checks the split of every impl against its loop, for runs of
// every width up to 40, with a guard band after dst.
func TestSplits(t *testing.T) {
	for _, im := range impls {
		for w := 1; w <= 40; w++ {
			for runs := range 3 {
				src := make([]uint32, w*runs)
				for i := range src {
					src[i] = uint32(i)*0x9e3779b9 + 7
				}
				dst := make([]float32, 2*len(src)+1)
				dst[len(dst)-1] = 42
				im.pack.split(dst[:2*len(src)], src, w)
				for i, v := range dst {
					want := uint32(0x42280000) // 42
					if q, j := i/(2*w)*w, i%(2*w); i < 2*len(src) && j < w {
						want = src[q+j] &^ 0xffff
					} else if i < 2*len(src) {
						want = src[q+j-w] << 16
					}
					if math.Float32bits(v) != want {
						t.Fatalf("%s: w=%d, %d runs: dst[%d] = %#x, want %#x", im.name, w, runs, i, math.Float32bits(v), want)
					}
				}
			}
		}
	}
}

// TestBF16Path checks SetBF16Path's names.
func TestBF16Path(t *testing.T) {
	defer SetBF16Path(PathAuto)
	if err := SetBF16Path("fast"); err == nil {
		t.Fatal(`SetBF16Path("fast") succeeded`)
	}
	for _, p := range append(BF16Paths(), PathAuto) {
		if err := SetBF16Path(p); err != nil {
			t.Fatal(err)
		}
		if got := BF16Path(); !slices.Contains(BF16Paths(), got) || p != PathAuto && got != p {
			t.Errorf("SetBF16Path(%s): BF16Path() = %s", p, got)
		}
	}
}

// TestBF16Env checks that BF16Env sets the path as the package starts,
// and that a path it does not have stops the program, naming the variable.
func TestBF16Env(t *testing.T) {
	defer SetBF16Path(PathAuto)
	for _, p := range BF16Paths() {
		t.Setenv(BF16Env, p)
		setBF16FromEnv()
		if got := BF16Path(); got != p {
			t.Errorf("%s=%s: BF16Path() = %s", BF16Env, p, got)
		}
	}
	t.Setenv(BF16Env, "fast")
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), BF16Env) {
			t.Errorf("%s=fast: panic %v, want one naming %s", BF16Env, r, BF16Env)
		}
	}()
	setBF16FromEnv()
}

// TestRound checks that float32 operands that round to bfloat16 or
// float16 (Matrix.Round) give the bits of their casts on every path,
// beside an operand of that dtype, each other, or a float32 one.
func TestRound(t *testing.T) {
	forEachBF16Path(t, func(t *testing.T) {
		for _, d := range []dtype.DType{dtype.BF16, dtype.F16} {
			testRound(t, d)
		}
	})
}

func testRound(t *testing.T, d dtype.DType) {
	forCases(t, dtypeShapes, func(t *testing.T, name string, rng *rand.Rand, s shape, ta, tb bool, beta float64) {
		name = fmt.Sprintf("%v/%s", d, name)
		f32 := func(rows, cols int, trans bool) (Matrix, Matrix) {
			x := newMat(rng, rows, cols, trans, 2)
			v := to32(x.v)
			cast := make([]byte, 2*len(v))
			dtype.Encode(d, cast, v, false)
			return Matrix{DType: dtype.F32, Data: bytesOf(v), LD: x.ld, Trans: trans, Round: d},
				Matrix{DType: d, Data: cast, LD: x.ld, Trans: trans}
		}
		ar, ac := f32(s.m, s.k, ta)
		br, bc := f32(s.k, s.n, tb)
		_, bf := f32(s.k, s.n, tb)
		pm := newMat(rng, s.k, s.n, tb, 1)
		bplain := Matrix{DType: dtype.F32, Data: bytesOf(to32(pm.v)), LD: pm.ld, Trans: tb}
		c64, ldc := newC(rng, s.m, s.n, beta)
		for _, op := range []struct {
			name               string
			a, b, wantA, wantB Matrix
		}{{"round×cast", ar, bf, ac, bf}, {"round×round", ar, br, ac, bc}, {"round×f32", ar, bplain, ac, bplain}} {
			got, want := to32(c64), to32(c64)
			F32(s.m, s.n, s.k, op.a, op.b, float32(beta), got, ldc)
			F32(s.m, s.n, s.k, op.wantA, op.wantB, float32(beta), want, ldc)
			for i := range got {
				if !sameBits(got[i], want[i]) {
					t.Fatalf("%s/%s: C[%d][%d] = %g, want %g", op.name, name, i/ldc, i%ldc, got[i], want[i])
				}
			}
		}
	})
}

// jobFunc is a function as a helper's job.
type jobFunc func()

func (f jobFunc) Do() { f() }

// TestBF16TimingWaitsForNothing: calls that reach the "auto" path while
// it times the two (on a helper, whose split timing product drains the
// other calls queued behind it and so runs them inside the timing) go
// ahead on the widen path rather than wait for the timing, which then
// waited for itself.
func TestBF16TimingWaitsForNothing(t *testing.T) {
	if len(BF16Paths()) < 2 || runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one bfloat16 path, or one core: nothing is timed, or nothing splits")
	}
	prev := bf16Choice.Load()
	defer bf16Choice.Store(prev)
	if err := SetBF16Path(PathAuto); err != nil {
		t.Fatal(err)
	}
	bf16Timed.Store(untimed)
	const calls = 32
	var wg sync.WaitGroup
	wg.Add(calls)
	jobs := par.Hire(1)
	for range calls {
		jobs <- jobFunc(func() { BF16Path(); wg.Done() })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("calls during the timing of the bfloat16 paths did not return within a minute")
	}
}

package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

func Numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// randT returns a tensor of dtype dt holding standard normal values rounded
// to dt (computed in float64 for F64, float32 otherwise).
func randT(rng *rand.Rand, dt dtype.DType, shape ...int) *tensor.Tensor {
	vals := make([]float64, Numel(shape))
	for i := range vals {
		vals[i] = rng.NormFloat64()
	}
	t := tensor.FromFloat64(vals, shape...)
	if dt == dtype.F64 {
		return t
	}
	return t.To(dtype.F32).To(dt)
}

// tol is the comparison tolerance against a float64 reference of a result
// computed in dt's compute type.
func tol(dt dtype.DType) float64 {
	switch dt {
	case dtype.F64:
		return 1e-12
	case dtype.F32:
		return 2e-6
	}
	return 1.0 / 128 // one rounding to a 16-bit float
}

// near fails unless got matches want within tolerance relative to the
// largest |want| (absolute for values near zero).
func near(t *testing.T, what string, got *tensor.Tensor, want []float64, eps float64) {
	t.Helper()
	g := got.Float64s()
	if len(g) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(g), len(want))
	}
	scale := 1.0
	for _, w := range want {
		scale = max(scale, math.Abs(w))
	}
	for i := range g {
		if math.Abs(g[i]-want[i]) > eps*scale {
			t.Errorf("%s[%d] = %.10g, want %.10g", what, i, g[i], want[i])
			return
		}
	}
}

// same reports whether a and b are equal or both NaN.
func same(a, b float32) bool { return a == b || a != a && b != b }

var allDTypes = []dtype.DType{dtype.F64, dtype.F32, dtype.F16, dtype.BF16, dtype.E4M3FN, dtype.E5M2,
	dtype.E4M3FNUZ, dtype.E5M2FNUZ, dtype.E2M1, dtype.E8M0, dtype.I8, dtype.I32, dtype.I64}

func TestNewStorageBytes(t *testing.T) {
	want := map[dtype.DType]int{dtype.F64: 120, dtype.F32: 60, dtype.F16: 30, dtype.BF16: 30,
		dtype.E4M3FN: 15, dtype.E5M2: 15, dtype.E4M3FNUZ: 15, dtype.E5M2FNUZ: 15, dtype.E2M1: 8,
		dtype.E8M0: 15, dtype.I8: 15, dtype.I32: 60, dtype.I64: 120}
	for _, dt := range allDTypes {
		x := tensor.New(dt, 3, 5)
		if x.Bytes() != want[dt] || len(x.Data()) != want[dt] || dt.StorageBytes(15) != want[dt] || x.Len() != 15 {
			t.Errorf("%v[3 5]: %d bytes (StorageBytes %d, Len %d), want %d", dt, x.Bytes(), dt.StorageBytes(15), x.Len(), want[dt])
		}
		if _, err := tensor.FromBytes(dt, make([]byte, want[dt]+1), 3, 5); err == nil {
			t.Errorf("%v: FromBytes accepted %d bytes for 15 elements", dt, want[dt]+1)
		}
	}
}

func TestCastRounding(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	vals := make([]float32, 200)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(40)-20)))
	}
	vals = append(vals, 0, -1e6, 1e6, 65520, 500, -7, float32(math.Inf(1)))
	src := tensor.FromFloat32(vals, len(vals))
	for _, dt := range []dtype.DType{dtype.BF16, dtype.F16, dtype.E4M3FN, dtype.E5M2, dtype.E4M3FNUZ, dtype.E2M1} {
		for _, sat := range []bool{false, true} {
			cast, round := src.To(dt), dt.Round
			if sat {
				cast, round = src.ToSat(dt), dt.RoundSat
			}
			if cast.DType() != dt {
				t.Fatalf("cast to %v gives %v", dt, cast)
			}
			for i, got := range cast.To(dtype.F32).Float32s() {
				if want := round(vals[i]); !same(got, want) {
					t.Errorf("%v sat=%v: %g round-trips to %g, want %g", dt, sat, vals[i], got, want)
				}
			}
		}
	}
	if src.To(dtype.F32) != src {
		t.Error("To of the tensor's own dtype copied it")
	}
}

func TestReshape(t *testing.T) {
	x := tensor.FromFloat32(make([]float32, 24), 2, 3, 4)
	for _, c := range []struct{ in, want []int }{
		{[]int{-1, 4}, []int{6, 4}}, {[]int{2, -1}, []int{2, 12}}, {[]int{4, -1, 3}, []int{4, 2, 3}}, {[]int{-1}, []int{24}},
	} {
		y := x.Reshape(c.in...)
		if fmt.Sprint(y.Shape()) != fmt.Sprint(c.want) || &y.Data()[0] != &x.Data()[0] {
			t.Errorf("Reshape(%v) = %v, want a view of shape %v", c.in, y.Shape(), c.want)
		}
	}
	mustPanic(t, "Reshape(5, -1) of 24 elements", func() { x.Reshape(5, -1) })
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}

func TestPermute(t *testing.T) {
	shape := []int{2, 3, 4, 5}
	vals := make([]float32, Numel(shape))
	for i := range vals {
		vals[i] = float32(i)
	}
	x := tensor.FromFloat32(vals, shape...)
	xb := x.To(dtype.BF16)
	for _, perm := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {0, 2, 1, 3}, {2, 0, 3, 1}, {1, 3, 0, 2}} {
		y := tensor.Permute(x, perm...)
		// Output element at multi-index o is input element at i with i[perm[k]] = o[k].
		got, in := y.Float32s(), make([]int, 4)
		for o := range got {
			rest := o
			for k := 3; k >= 0; k-- {
				in[perm[k]] = rest % y.Dim(k)
				rest /= y.Dim(k)
			}
			if want := ((in[0]*3+in[1])*4+in[2])*5 + in[3]; got[o] != float32(want) {
				t.Fatalf("perm %v: element %d = %g, want %d", perm, o, got[o], want)
			}
		}
		inv := make([]int, len(perm))
		for k, p := range perm {
			inv[p] = k
		}
		back := tensor.Permute(tensor.Permute(xb, perm...), inv...)
		if string(back.Data()) != string(xb.Data()) || fmt.Sprint(back.Shape()) != fmt.Sprint(shape) {
			t.Errorf("perm %v: bf16 round trip through the inverse changed the tensor", perm)
		}
	}
	mustPanic(t, "Permute of E2M1", func() { tensor.Permute(tensor.New(dtype.E2M1, 2, 2), 1, 0) })
}

// TestNarrowAdjoint: <Narrow(x), y> = <x, Unnarrow(y)>, and Unnarrow is zero outside the window.
func TestNarrowAdjoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	const c, start, length = 7, 2, 3
	x, y := randT(rng, dtype.F64, 3, 4, c), randT(rng, dtype.F64, 3, 4, length)
	n, u := tensor.Narrow(x, start, length), tensor.Unnarrow(y, start, c)
	if fmt.Sprint(n.Shape(), u.Shape()) != "[3 4 3] [3 4 7]" {
		t.Fatalf("shapes %v and %v", n.Shape(), u.Shape())
	}
	var lhs, rhs float64
	for i, v := range n.Float64s() {
		lhs += v * y.Float64s()[i]
	}
	for i, v := range u.Float64s() {
		rhs += v * x.Float64s()[i]
		if j := i % c; (j < start || j >= start+length) && v != 0 {
			t.Errorf("Unnarrow element %d (column %d) = %g, want 0", i, j, v)
		}
	}
	if math.Abs(lhs-rhs) > 1e-12 {
		t.Errorf("<Narrow(x), y> = %v, <x, Unnarrow(y)> = %v", lhs, rhs)
	}
}

// TestIndexErrors: out-of-range indices are errors (one line naming the value), not panics.
func TestIndexErrors(t *testing.T) {
	logits := tensor.New(dtype.F32, 2, 4)
	table := tensor.New(dtype.BF16, 5, 3)
	for _, c := range []struct {
		name string
		bad  int
		call func(bad int) (*tensor.Tensor, error)
	}{
		{"Embedding", 5, func(bad int) (*tensor.Tensor, error) { return tensor.Embedding(table, []int{0, bad}) }},
		{"Embedding", -1, func(bad int) (*tensor.Tensor, error) { return tensor.Embedding(table, []int{bad, 0}) }},
		{"CrossEntropy", 9, func(bad int) (*tensor.Tensor, error) { return tensor.CrossEntropy(logits, []int{1, bad}) }},
		{"CrossEntropy", -3, func(bad int) (*tensor.Tensor, error) { return tensor.CrossEntropy(logits, []int{bad, 1}) }},
	} {
		out, err := c.call(c.bad)
		if err == nil || out != nil {
			t.Errorf("%s with index %d: %v, %v", c.name, c.bad, out, err)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, strconv.Itoa(c.bad)) {
			t.Errorf("%s with index %d: error %q should be one line naming it", c.name, c.bad, msg)
		}
	}
	if _, err := tensor.CrossEntropy(logits, []int{1}); err == nil {
		t.Error("CrossEntropy accepted 1 target for 2 rows")
	}
}

func TestMatMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	const m, n, k = 4, 6, 5
	for _, dt := range []dtype.DType{dtype.F64, dtype.F32, dtype.BF16} {
		for _, sharedB := range []bool{false, true} {
			for tr := range 4 {
				transA, transB := tr&1 != 0, tr&2 != 0
				sa, sb := []int{2, 3, m, k}, []int{2, 3, k, n}
				if transA {
					sa[2], sa[3] = k, m
				}
				if transB {
					sb[2], sb[3] = n, k
				}
				if sharedB {
					sb = sb[2:]
				}
				a, b := randT(rng, dt, sa...), randT(rng, dt, sb...)
				got := tensor.MatMul(a, b, transA, transB)
				what := fmt.Sprintf("%v transA=%v transB=%v sharedB=%v", dt, transA, transB, sharedB)
				if got.DType() != dt || fmt.Sprint(got.Shape()) != fmt.Sprint([]int{2, 3, m, n}) {
					t.Fatalf("%s: result %v", what, got)
				}
				want, _ := refMatMul(a.Float64s(), b.Float64s(), 1, 1, 6, m, n, k, transA, transB, sharedB)
				near(t, what, got, want, tol(dt))
			}
		}
	}
}

// TestLinearBiasBeforeRounding: in bf16 the bias is added to the float32
// accumulator and the sum rounded once. Inputs are multiples of 1/8 that
// keep every float32 partial sum exact, so the order of accumulation cannot
// matter.
func TestLinearBiasBeforeRounding(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	const rows, in, out = 8, 32, 16
	eighths := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.IntN(65)-32) / 8
		}
		return v
	}
	xs, ws, bs := eighths(rows*in), eighths(out*in), eighths(out)
	x, w, b := tensor.FromFloat32(xs, rows, in).To(dtype.BF16), tensor.FromFloat32(ws, out, in).To(dtype.BF16), tensor.FromFloat32(bs, out).To(dtype.BF16)
	y := tensor.Linear(x, w, b)
	if y.DType() != dtype.BF16 {
		t.Fatalf("bf16 Linear gives %v", y)
	}
	doubleRounded := 0
	for r := range rows {
		for o := range out {
			var acc float32
			for i := range in {
				acc += xs[r*in+i] * ws[o*in+i]
			}
			want := dtype.BF16.Round(acc + bs[o])
			if got := y.Float32s()[r*out+o]; got != want {
				t.Errorf("y[%d,%d] = %g, want round(%g + %g) = %g", r, o, got, acc, bs[o], want)
			}
			if dtype.BF16.Round(dtype.BF16.Round(acc)+bs[o]) != want {
				doubleRounded++
			}
		}
	}
	if doubleRounded == 0 {
		t.Error("no element distinguishes one rounding from two; the test data are too easy")
	}
}

func TestPromote(t *testing.T) {
	for _, c := range []struct{ a, b, want dtype.DType }{
		{dtype.BF16, dtype.F16, dtype.F32}, {dtype.BF16, dtype.F32, dtype.F32}, {dtype.F32, dtype.F64, dtype.F64},
		{dtype.BF16, dtype.F64, dtype.F64}, {dtype.BF16, dtype.BF16, dtype.BF16}, {dtype.F16, dtype.F16, dtype.F16},
	} {
		for _, ab := range [][2]dtype.DType{{c.a, c.b}, {c.b, c.a}} {
			if got := tensor.Promote(ab[0], ab[1]); got != c.want {
				t.Errorf("Promote(%v, %v) = %v, want %v", ab[0], ab[1], got, c.want)
			}
			if got := tensor.Add(tensor.New(ab[0], 2), tensor.New(ab[1], 2)).DType(); got != c.want {
				t.Errorf("Add of %v and %v gives %v, want %v", ab[0], ab[1], got, c.want)
			}
		}
	}
}

// adamWRef transcribes AdamWStep's eight tensor ops, rounding each result with r.
func adamWRef[T float32 | float64](p, g, m, v []T, s tensor.AdamWScalars, r func(T) T) {
	decay, lerp, b2, omb2 := T(s.Decay), T(s.Lerp), T(s.Beta2), T(s.OneMinusB2)
	bc2, eps, step := T(s.BC2Sqrt), T(s.Eps), T(s.NegStepSize)
	for i := range p {
		p[i] = r(p[i] * decay)              // p.mul_(1 - lr·wd)
		m[i] = r(m[i] + lerp*(g[i]-m[i]))   // m.lerp_(g, 1-β1)
		v[i] = r(v[i] * b2)                 // v.mul_(β2)
		v[i] = r(v[i] + omb2*g[i]*g[i])     // v.addcmul_(g, g, 1-β2)
		d := r(T(math.Sqrt(float64(v[i])))) // v.sqrt()
		d = r(d / bc2)                      // / bias_correction2_sqrt
		d = r(d + eps)                      // + eps
		p[i] = r(p[i] + step*(m[i]/d))      // p.addcdiv_(m, d, -step_size)
	}
}

func adamWScalars(step int) tensor.AdamWScalars {
	const lr, wd, b1, b2, eps = 1e-2, 0.1, 0.9, 0.999, 3e-3 // eps large enough that rounding before adding it shows
	return tensor.AdamWScalars{
		Decay: 1 - lr*wd, Lerp: 1 - b1, Beta2: b2, OneMinusB2: 1 - b2,
		BC2Sqrt: math.Sqrt(1 - math.Pow(b2, float64(step))), Eps: eps,
		NegStepSize: -lr / (1 - math.Pow(b1, float64(step))),
	}
}

// updateCase is one optimizer dtype: its rounding in float32 arithmetic
// (nil for F64, whose reference runs in float64).
var updateCases = []struct {
	dt    dtype.DType
	round func(float32) float32
}{{dtype.F64, nil}, {dtype.F32, func(x float32) float32 { return x }}, {dtype.BF16, dtype.BF16.Round}}

// state returns n random elements of dt, |v| for positive ones, as a tensor
// and as float32 and float64 copies.
func state(rng *rand.Rand, dt dtype.DType, n int, positive bool) (*tensor.Tensor, []float32, []float64) {
	t := randT(rng, dt, n)
	if positive {
		vals := t.Float64s()
		for i := range vals {
			vals[i] = math.Abs(vals[i]) * 1e-3
		}
		t = tensor.FromFloat64(vals, n)
		if dt != dtype.F64 {
			t = t.To(dtype.F32).To(dt)
		}
	}
	return t, t.Float32s(), t.Float64s()
}

func TestAdamWStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	const n = 257
	for _, c := range updateCases {
		p, p32, p64 := state(rng, c.dt, n, false)
		g, g32, g64 := state(rng, c.dt, n, false)
		m, m32, m64 := state(rng, c.dt, n, false)
		v, v32, v64 := state(rng, c.dt, n, true)
		for step := 1; step <= 3; step++ {
			s := adamWScalars(step)
			tensor.AdamWStep(p, g, m, v, s)
			if c.round == nil {
				adamWRef(p64, g64, m64, v64, s, func(x float64) float64 { return x })
			} else {
				adamWRef(p32, g32, m32, v32, s, c.round)
			}
		}
		got, want := []*tensor.Tensor{p, m, v}, [][]float64{p64, m64, v64}
		if c.round != nil {
			want = [][]float64{widen(p32), widen(m32), widen(v32)}
		}
		equal(t, fmt.Sprintf("%v AdamW", c.dt), c.dt, got, want)
	}
}

// equal fails unless every tensor has dtype dt and exactly the wanted values.
func equal(t *testing.T, what string, dt dtype.DType, got []*tensor.Tensor, want [][]float64) {
	t.Helper()
	for k, g := range got {
		if g.DType() != dt {
			t.Errorf("%s: result %d became %v", what, k, g)
		}
		for i, v := range g.Float64s() {
			if v != want[k][i] {
				t.Errorf("%s: result %d element %d = %v, want %v", what, k, i, v, want[k][i])
				break
			}
		}
	}
}

func widen(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func TestSGDStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	const lr = 0.037
	for _, c := range updateCases {
		p, p32, p64 := state(rng, c.dt, 100, false)
		g, g32, g64 := state(rng, c.dt, 100, false)
		tensor.SGDStep(p, g, lr)
		want := make([]float64, len(p64))
		for i := range want {
			if c.round == nil {
				want[i] = p64[i] + -lr*g64[i]
			} else {
				want[i] = float64(c.round(p32[i] + float32(-lr)*g32[i]))
			}
		}
		equal(t, fmt.Sprintf("%v SGD", c.dt), c.dt, []*tensor.Tensor{p}, [][]float64{want})
	}
}

func TestLayerNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	const c, eps = 8, 1e-5
	for _, dt := range []dtype.DType{dtype.F64, dtype.F32} {
		x, w, b := randT(rng, dt, 4, 3, c), randT(rng, dt, c), randT(rng, dt, c)
		y, mean, rstd := tensor.LayerNorm(x, w, b, eps)
		xs, ws, bs := x.Float64s(), w.Float64s(), b.Float64s()
		want, wantMean, wantRstd := make([]float64, len(xs)), make([]float64, 12), make([]float64, 12)
		for r := range wantMean {
			row := xs[r*c : (r+1)*c]
			var mu, sq float64
			for _, v := range row {
				mu += v / c
			}
			for _, v := range row {
				sq += (v - mu) * (v - mu) / c
			}
			wantMean[r], wantRstd[r] = mu, 1/math.Sqrt(sq+eps)
			for j, v := range row {
				want[r*c+j] = (v-mu)*wantRstd[r]*ws[j] + bs[j]
			}
		}
		if y.DType() != dt || !y.SameShape(x) {
			t.Fatalf("%v: LayerNorm gives %v", dt, y)
		}
		near(t, dt.String()+" y", y, want, tol(dt))
		near(t, dt.String()+" mean", mean, wantMean, tol(dt))
		near(t, dt.String()+" rstd", rstd, wantRstd, tol(dt))
	}
}

func TestSoftmax(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	inf := math.Inf(-1)
	for _, dt := range []dtype.DType{dtype.F64, dtype.F32, dtype.BF16} {
		x := randT(rng, dtype.F64, 4, 6)
		vals := x.Float64s()
		vals[1], vals[6+5], vals[12], vals[13], vals[14] = inf, inf, inf, inf, inf
		x = tensor.FromFloat64(vals, 4, 6).To(dtype.F32).To(dt)
		vals = x.Float64s()
		y := tensor.Softmax(x)
		if y.DType() != dt {
			t.Fatalf("%v: Softmax gives %v", dt, y)
		}
		want := make([]float64, len(vals))
		for r := 0; r < len(vals); r += 6 {
			var sum float64
			for j := range 6 {
				want[r+j] = math.Exp(vals[r+j])
				sum += want[r+j]
			}
			for j := range 6 {
				want[r+j] /= sum
			}
		}
		eps := tol(dt)
		near(t, dt.String()+" softmax", y, want, eps)
		ys := y.Float64s()
		for r := 0; r < len(ys); r += 6 {
			var sum float64
			for j := range 6 {
				sum += ys[r+j]
				if vals[r+j] == inf && ys[r+j] != 0 {
					t.Errorf("%v: softmax of -inf at %d is %g", dt, r+j, ys[r+j])
				}
			}
			if math.Abs(sum-1) > 6*eps {
				t.Errorf("%v: row %d sums to %v", dt, r/6, sum)
			}
		}
	}
}

func TestCausalMask(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.F64, dtype.BF16} {
		x := tensor.New(dt, 2, 3, 4)
		x.Fill(1)
		for _, fill := range []float64{math.Inf(-1), 0} {
			for k, v := range tensor.CausalMask(x, fill).Float64s() {
				want := 1.0
				if i, j := k/4%3, k%4; j > i {
					want = fill
				}
				if v != want {
					t.Errorf("%v fill %v: element %d = %v, want %v", dt, fill, k, v, want)
				}
			}
		}
	}
}

func TestConv2d(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, g := range []tensor.ConvGeom{
		{N: 2, C: 3, H: 6, W: 5, Cout: 4, KH: 3, KW: 3, Stride: 1, Pad: 0},
		{N: 2, C: 3, H: 6, W: 5, Cout: 4, KH: 3, KW: 3, Stride: 2, Pad: 1},
		{N: 1, C: 2, H: 7, W: 7, Cout: 3, KH: 2, KW: 3, Stride: 2, Pad: 2},
		{N: 3, C: 4, H: 4, W: 4, Cout: 2, KH: 1, KW: 1, Stride: 1, Pad: 0},
		{N: 16, C: 4, H: 16, W: 16, Cout: 2, KH: 3, KW: 3, Stride: 1, Pad: 1}, // im2col split across cores
	} {
		g.OutH, g.OutW = (g.H+2*g.Pad-g.KH)/g.Stride+1, (g.W+2*g.Pad-g.KW)/g.Stride+1
		for _, dt := range []dtype.DType{dtype.F64, dtype.F32} {
			x, w := randT(rng, dt, g.N, g.C, g.H, g.W), randT(rng, dt, g.Cout, g.C, g.KH, g.KW)
			y := tensor.Conv2d(x, w, g.Stride, g.Pad)
			what := fmt.Sprintf("%v %+v", dt, g)
			if y.DType() != dt || fmt.Sprint(y.Shape()) != fmt.Sprint([]int{g.N, g.Cout, g.OutH, g.OutW}) {
				t.Fatalf("%s: result %v", what, y)
			}
			want, _ := refConv2d(x.Float64s(), w.Float64s(), g)
			near(t, what, y, want, tol(dt))
		}
	}
}

func dot(a, b *tensor.Tensor) float64 {
	var s float64
	bs := b.Float64s()
	for i, v := range a.Float64s() {
		s += v * bs[i]
	}
	return s
}

func BenchmarkLinear(b *testing.B) {
	rng := rand.New(rand.NewPCG(10, 10))
	x, bias := randT(rng, dtype.F32, 512, 256), randT(rng, dtype.F32, 256)
	for _, dt := range []dtype.DType{dtype.F32, dtype.BF16} {
		w := randT(rng, dt, 256, 256)
		b.Run(dt.String(), func(b *testing.B) {
			b.SetBytes(int64(x.Bytes() + w.Bytes()))
			for b.Loop() {
				tensor.Linear(x, w, bias)
			}
			b.ReportMetric(2*512*256*256*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func TestCrossEntropy(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	const c = 7
	for _, dt := range []dtype.DType{dtype.F64, dtype.F32} {
		for _, n := range []int{1, 5, 16, 40, 400} {
			t.Run(fmt.Sprintf("%v/rows=%d", dt, n), func(t *testing.T) {
				logits, targets := randT(rng, dt, n, c), make([]int, n)
				zs := logits.Float64s()
				var want float64
				wantGrad := make([]float64, n*c)
				for i := range targets {
					targets[i] = rng.IntN(c)
					row := zs[i*c : (i+1)*c]
					var sum float64
					for _, z := range row {
						sum += math.Exp(z)
					}
					want += (math.Log(sum) - row[targets[i]]) / float64(n)
					for j, z := range row {
						wantGrad[i*c+j] = 0.5 * math.Exp(z) / sum / float64(n) // dloss = 0.5
					}
					wantGrad[i*c+targets[i]] -= 0.5 / float64(n)
				}
				loss, err := tensor.CrossEntropy(logits, targets)
				if err != nil || loss.DType() != dt || loss.Len() != 1 {
					t.Fatalf("CrossEntropy: %v, %v", loss, err)
				}
				near(t, "loss", loss, []float64{want}, tol(dt))
				near(t, "gradient", tensor.CrossEntropyBackward(logits, targets, tensor.Scalar(dt, 0.5)), wantGrad, tol(dt))
			})
		}
	}
}

// TestRowOpsSplitAcrossCores: LayerNorm and softmax of a tensor large
// enough to split across cores give, bit for bit, what each row alone gives.
func TestRowOpsSplitAcrossCores(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const rows, c = 4, 1 << 16
	x, dy := randT(rng, dtype.F32, rows, c), randT(rng, dtype.F32, rows, c)
	w, b := randT(rng, dtype.F32, c), randT(rng, dtype.F32, c)
	y, _, _ := tensor.LayerNorm(x, w, b, 1e-5)
	s := tensor.Softmax(x)
	ds := tensor.SoftmaxBackward(s, dy)
	for r := range rows {
		row := func(t *tensor.Tensor) *tensor.Tensor { return tensor.SliceRows(t, r, 1) }
		yr, _, _ := tensor.LayerNorm(row(x), w, b, 1e-5)
		sr := tensor.Softmax(row(x))
		for name, pair := range map[string][2]*tensor.Tensor{
			"LayerNorm":       {row(y), yr},
			"Softmax":         {row(s), sr},
			"SoftmaxBackward": {row(ds), tensor.SoftmaxBackward(sr, row(dy))},
		} {
			if string(pair[0].Data()) != string(pair[1].Data()) {
				t.Errorf("%s: row %d differs from the row computed alone", name, r)
			}
		}
	}
}

// TestNormAndNonFinite: Norm accumulates in float64 whatever the storage,
// and HasNonFinite finds an inf or NaN in any float dtype.
func TestNormAndNonFinite(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.F64, dtype.F32, dtype.BF16, dtype.F16} {
		x := tensor.FromFloat64([]float64{3, -4, 0.5, 0}, 4).To(dt)
		if got, want := x.Norm(), math.Sqrt(9+16+0.25); got != want {
			t.Errorf("%v: Norm = %v, want %v", dt, got, want)
		}
		if x.HasNonFinite() {
			t.Errorf("%v: finite values reported non-finite", dt)
		}
		for _, bad := range []float64{math.Inf(1), math.Inf(-1), math.NaN()} {
			if y := tensor.FromFloat64([]float64{1, 2, bad}, 3).To(dt); !y.HasNonFinite() {
				t.Errorf("%v: %v not found", dt, bad)
			}
		}
	}
}

// TestScaleToAndAbsMax: ScaleTo rounds each float32 product v·scale to the
// dtype with saturation, and AbsMax is the largest |v|.
func TestScaleToAndAbsMax(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, dt := range []dtype.DType{dtype.F32, dtype.BF16} {
		x := randT(rng, dt, 5, 7)
		vals := x.Float32s()
		var want float32
		for _, v := range vals {
			want = max(want, float32(math.Abs(float64(v))))
		}
		if got := x.AbsMax(); got != want {
			t.Errorf("%v: AbsMax = %v, want %v", dt, got, want)
		}
		const scale = 300
		q := tensor.ScaleTo(x, scale, dtype.E4M3FN)
		for i, got := range q.Float32s() {
			if want := dtype.E4M3FN.RoundSat(vals[i] * scale); got != want {
				t.Fatalf("%v: ScaleTo element %d = %v, want %v", dt, i, got, want)
			}
		}
	}
}

// TestParallelSplitsConcurrently: splits from several goroutines share the
// helpers (a caller may run another call's range) and each still gets
// its own whole result.
func TestParallelSplitsConcurrently(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	xs := make([]*tensor.Tensor, 4)
	want := make([]string, len(xs))
	for i := range xs {
		xs[i] = randT(rng, dtype.F32, 4, 1<<16)
		want[i] = string(tensor.Softmax(xs[i]).Data())
	}
	var wg sync.WaitGroup
	errs := make([]bool, len(xs))
	for i := range xs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				if string(tensor.Softmax(xs[i]).Data()) != want[i] {
					errs[i] = true
				}
			}
		}()
	}
	wg.Wait()
	for i, bad := range errs {
		if bad {
			t.Errorf("goroutine %d: a concurrent softmax differs from its serial result", i)
		}
	}
}

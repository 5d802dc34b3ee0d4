package autograd_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// Central differences in float64: with h = 1e-6 the truncation error is
// about h² and the cancellation error about 1e-16·|f|/h, both far below relTol.
const (
	fdStep = 1e-6
	relTol = 1e-6
	absTol = 1e-8
)

type buildFunc func(tp *autograd.Tape, vars []*autograd.Var) *autograd.Var

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// randn returns an F64 tensor of standard normal values.
func randn(rng *rand.Rand, shape ...int) *tensor.Tensor {
	vals := make([]float64, numel(shape))
	for i := range vals {
		vals[i] = rng.NormFloat64()
	}
	return tensor.FromFloat64(vals, shape...)
}

// awayFromZero moves every element at least 0.1 away from zero, so that
// finite differences never straddle ReLU's kink.
func awayFromZero(t *tensor.Tensor) *tensor.Tensor {
	vals := t.Float64s()
	for i, v := range vals {
		vals[i] = math.Copysign(math.Abs(v)+0.1, v)
	}
	return tensor.FromFloat64(vals, t.Shape()...)
}

// weights returns the fixed random weighting r [1, n] that scalarize uses.
func weights(n int) *tensor.Tensor {
	return randn(rand.New(rand.NewPCG(7, uint64(n))), 1, n)
}

// scalarize reduces out to Σ out·r for the fixed weighting r, as the
// product of out reshaped to [1, n] with rᵀ; a one-element out is kept.
func scalarize(tp *autograd.Tape, out *autograd.Var) *autograd.Var {
	n := out.Value.Len()
	if n == 1 {
		return out
	}
	return tp.MatMul(tp.Reshape(out, 1, n), autograd.Const(weights(n)), true)
}

// loss evaluates the scalarized build without recording.
func loss(build buildFunc, inputs []*tensor.Tensor) float64 {
	tp := &autograd.Tape{NoGrad: true}
	vars := make([]*autograd.Var, len(inputs))
	for i, in := range inputs {
		vars[i] = autograd.Const(in)
	}
	return scalarize(tp, build(tp, vars)).Value.Float64s()[0]
}

// backward runs the scalarized build with every input a parameter and
// returns their gradients, each checked to have its input's dtype and shape.
func backward(t *testing.T, build buildFunc, inputs ...*tensor.Tensor) ([]*autograd.Var, []*tensor.Tensor) {
	t.Helper()
	var tp autograd.Tape
	vars := make([]*autograd.Var, len(inputs))
	for i, in := range inputs {
		vars[i] = autograd.Param(in)
	}
	if err := tp.Backward(scalarize(&tp, build(&tp, vars))); err != nil {
		t.Fatal(err)
	}
	grads := make([]*tensor.Tensor, len(vars))
	for i, v := range vars {
		if v.Grad == nil || v.Grad.DType() != v.Value.DType() || !v.Grad.SameShape(v.Value) {
			t.Fatalf("input %d (%v): gradient %v", i, v.Value, v.Grad)
		}
		grads[i] = v.Grad
	}
	return vars, grads
}

// checkGradients compares the gradient Backward gives every input with
// central finite differences, and returns those gradients.
func checkGradients(t *testing.T, build buildFunc, inputs ...*tensor.Tensor) []*tensor.Tensor {
	t.Helper()
	vars, grads := backward(t, build, inputs...)
	for i, v := range vars {
		got, x := v.Grad.Float64s(), v.Value.Float64s()
		for j := range x {
			at := func(xj float64) float64 {
				xs, in := slices.Clone(x), slices.Clone(inputs)
				xs[j] = xj
				in[i] = tensor.FromFloat64(xs, v.Value.Shape()...)
				return loss(build, in)
			}
			hi, lo := x[j]+fdStep, x[j]-fdStep
			want := (at(hi) - at(lo)) / (hi - lo)
			if d := math.Abs(got[j] - want); d > max(relTol*max(math.Abs(got[j]), math.Abs(want)), absTol) {
				t.Errorf("input %d element %d: backward %.12g, finite difference %.12g", i, j, got[j], want)
			}
		}
	}
	return grads
}

// opt returns vars[i], or nil when the case has no input i (a bias left out).
func opt(vars []*autograd.Var, i int) *autograd.Var {
	if i < len(vars) {
		return vars[i]
	}
	return nil
}

func must(v *autograd.Var, err error) *autograd.Var {
	if err != nil {
		panic(err)
	}
	return v
}

type gradCase struct {
	name   string
	build  buildFunc
	inputs []*tensor.Tensor
	check  func(t *testing.T, grads []*tensor.Tensor) // optional extra assertions
}

func gradCases() []gradCase {
	rng := rand.New(rand.NewPCG(1, 2))
	x := func(shape ...int) *tensor.Tensor { return randn(rng, shape...) }
	linear := func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.Linear(v[0], v[1], opt(v, 2)) }
	matmul := func(transB bool) buildFunc {
		return func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.MatMul(v[0], v[1], transB) }
	}
	broadcast := func(from int) buildFunc {
		return func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.AddBroadcast(v[0], v[1], from) }
	}
	idx := []int{1, 3, 1, 0, 1, 4}
	targets := []int{2, 0, 4, 4}
	manyTargets := make([]int, 20)
	for i := range manyTargets {
		manyTargets[i] = rng.IntN(3)
	}
	cases := []gradCase{
		{name: "Linear/bias", build: linear, inputs: []*tensor.Tensor{x(2, 3, 4), x(5, 4), x(5)}},
		{name: "Linear/nobias", build: linear, inputs: []*tensor.Tensor{x(3, 4), x(5, 4)}},
		{name: "MatMul/2d", build: matmul(false), inputs: []*tensor.Tensor{x(3, 4), x(4, 5)}},
		{name: "MatMul/transB", build: matmul(true), inputs: []*tensor.Tensor{x(3, 4), x(5, 4)}},
		{name: "MatMul/4d", build: matmul(false), inputs: []*tensor.Tensor{x(2, 3, 4, 5), x(2, 3, 5, 2)}},
		{name: "MatMul/4d_transB", build: matmul(true), inputs: []*tensor.Tensor{x(2, 3, 4, 5), x(2, 3, 2, 5)}},
		{name: "MatMul/sharedB", build: matmul(false), inputs: []*tensor.Tensor{x(2, 3, 4), x(4, 5)}},
		{name: "MatMul/sharedB_transB", build: matmul(true), inputs: []*tensor.Tensor{x(2, 3, 4), x(5, 4)}},
		{name: "Add", inputs: []*tensor.Tensor{x(3, 4), x(3, 4)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.Add(v[0], v[1]) }},
		{name: "AddBroadcast/from0", build: broadcast(0), inputs: []*tensor.Tensor{x(3, 4, 2), x(3)}},
		{name: "AddBroadcast/from1", build: broadcast(1), inputs: []*tensor.Tensor{x(2, 3, 4), x(3, 4)}},
		{name: "AddBroadcast/channels", build: broadcast(1), inputs: []*tensor.Tensor{x(2, 3, 2, 2), x(3)}},
		{name: "Scale", inputs: []*tensor.Tensor{x(3, 4)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.Scale(v[0], -0.7) }},
		{name: "GELU", inputs: []*tensor.Tensor{x(3, 5)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.GELU(v[0]) }},
		{name: "ReLU", inputs: []*tensor.Tensor{awayFromZero(x(3, 5))},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.ReLU(v[0]) }},
		{name: "Softmax", inputs: []*tensor.Tensor{x(3, 5)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.Softmax(v[0]) }},
		{name: "CausalMask+Softmax", inputs: []*tensor.Tensor{x(2, 3, 4, 4)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.Softmax(tp.CausalMask(v[0])) },
			check: func(t *testing.T, grads []*tensor.Tensor) {
				for k, g := range grads[0].Float64s() {
					if i, j := k/4%4, k%4; j > i && g != 0 {
						t.Errorf("masked entry %d (row %d, column %d) has gradient %g, want 0", k, i, j, g)
					}
				}
			}},
		{name: "LayerNorm", inputs: []*tensor.Tensor{x(2, 3, 6), x(6), x(6)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.LayerNorm(v[0], v[1], v[2], 1e-5) }},
		{name: "GELUTanh", inputs: []*tensor.Tensor{x(3, 5)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.GELUTanh(v[0]) }},
		{name: "SiLU", inputs: []*tensor.Tensor{x(3, 5)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.SiLU(v[0]) }},
		{name: "Mul", inputs: []*tensor.Tensor{x(3, 4), x(3, 4)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.Mul(v[0], v[1]) }},
		{name: "RMSNorm", inputs: []*tensor.Tensor{x(2, 3, 6), x(6)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.RMSNorm(v[0], v[1], 1e-5) }},
		{name: "Rotary", inputs: []*tensor.Tensor{x(2, 3, 5, 6)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.Rotary(v[0], 10000) }},
		{name: "Embedding", inputs: []*tensor.Tensor{x(5, 3)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return must(tp.Embedding(v[0], idx, 2, 3)) },
			check: func(t *testing.T, grads []*tensor.Tensor) {
				if g := grads[0].Float64s()[2*3 : 3*3]; slices.ContainsFunc(g, func(v float64) bool { return v != 0 }) {
					t.Errorf("row 2 is never looked up but has gradient %v", g)
				}
			}},
		{name: "Reshape", inputs: []*tensor.Tensor{x(2, 6)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.GELU(tp.Reshape(v[0], 3, -1)) }},
		{name: "Permute", inputs: []*tensor.Tensor{x(2, 3, 4)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.Permute(v[0], 2, 0, 1) }},
		{name: "Narrow", inputs: []*tensor.Tensor{x(3, 7)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.Narrow(v[0], 2, 3) }},
		{name: "CrossEntropy/rows=4", inputs: []*tensor.Tensor{x(4, 5)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return must(tp.CrossEntropy(v[0], targets)) }},
		{name: "CrossEntropy/rows=20", inputs: []*tensor.Tensor{x(20, 3)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var {
				return must(tp.CrossEntropy(v[0], manyTargets))
			}},
		{name: "Cast/F64", inputs: []*tensor.Tensor{x(3, 4)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var { return tp.Cast(v[0], dtype.F64) }},
		{name: "Attention", inputs: []*tensor.Tensor{x(2, 4, 3), x(2, 4, 3), x(2, 4, 3)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var {
				att := tp.Softmax(tp.CausalMask(tp.Scale(tp.MatMul(v[0], v[1], true), 0.5)))
				return tp.MatMul(att, v[2], false)
			}},
	}
	for _, g := range []struct {
		stride, pad int
		bias        bool
	}{{1, 0, true}, {1, 1, false}, {2, 0, false}, {2, 1, true}} {
		c := gradCase{
			name:   fmt.Sprintf("Conv2d/stride%d_pad%d_bias=%v", g.stride, g.pad, g.bias),
			inputs: []*tensor.Tensor{x(2, 3, 5, 5), x(4, 3, 3, 3)},
			build: func(tp *autograd.Tape, v []*autograd.Var) *autograd.Var {
				return tp.Conv2d(v[0], v[1], opt(v, 2), g.stride, g.pad)
			},
		}
		if g.bias {
			c.inputs = append(c.inputs, x(4))
		}
		cases = append(cases, c)
	}
	return cases
}

func TestGradients(t *testing.T) {
	for _, c := range gradCases() {
		t.Run(c.name, func(t *testing.T) {
			grads := checkGradients(t, c.build, c.inputs...)
			if c.check != nil {
				c.check(t, grads)
			}
		})
	}
}

// TestCastRoundTripGradient: through a cast to F32 and back, the gradient
// reaches an F64 leaf in F64, rounded once to float32 on the way.
func TestCastRoundTripGradient(t *testing.T) {
	var tp autograd.Tape
	x := autograd.Param(randn(rand.New(rand.NewPCG(3, 4)), 3, 4))
	y := tp.Cast(tp.Cast(x, dtype.F32), dtype.F64)
	if y.Value.DType() != dtype.F64 {
		t.Fatalf("round trip gives %v", y.Value)
	}
	if err := tp.Backward(scalarize(&tp, y)); err != nil {
		t.Fatal(err)
	}
	if x.Grad.DType() != dtype.F64 {
		t.Fatalf("gradient is %v, want float64", x.Grad)
	}
	for i, r := range weights(12).Float64s() {
		if got, want := x.Grad.Float64s()[i], float64(float32(r)); got != want {
			t.Errorf("element %d: gradient %v, want %v", i, got, want)
		}
	}
}

// linearLoss is GELU(Linear(x, w, b)), scalarized.
func linearLoss(tp *autograd.Tape, x, w, b *autograd.Var) *autograd.Var {
	return scalarize(tp, tp.GELU(tp.Linear(x, w, b)))
}

func TestGradientsAccumulate(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	x := autograd.Const(randn(rng, 3, 4))
	w, b := autograd.Param(randn(rng, 3, 4)), autograd.Param(randn(rng, 3))
	var tp autograd.Tape
	var first []*tensor.Tensor
	for range 2 {
		if err := tp.Backward(linearLoss(&tp, x, w, b)); err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = []*tensor.Tensor{w.Grad.Clone(), b.Grad.Clone()}
		}
	}
	for i, p := range []*autograd.Var{w, b} {
		for j, g := range p.Grad.Float64s() {
			if want := 2 * first[i].Float64s()[j]; g != want {
				t.Errorf("param %d element %d: accumulated %v, want %v", i, j, g, want)
			}
		}
	}
	if x.Grad != nil {
		t.Errorf("a constant got gradient %v", x.Grad)
	}
}

func TestBackwardErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	x, w := randn(rng, 3, 4), randn(rng, 3, 4)
	for _, c := range []struct {
		name      string
		noGrad    bool
		loss      func(tp *autograd.Tape, w *autograd.Var) *autograd.Var
		notScalar bool
	}{
		{name: "non-scalar", notScalar: true, loss: func(tp *autograd.Tape, w *autograd.Var) *autograd.Var {
			return tp.Linear(autograd.Const(x), w, nil)
		}},
		{name: "constant loss", loss: func(tp *autograd.Tape, _ *autograd.Var) *autograd.Var {
			return linearLoss(tp, autograd.Const(x), autograd.Const(w), nil)
		}},
		{name: "NoGrad", noGrad: true, loss: func(tp *autograd.Tape, w *autograd.Var) *autograd.Var {
			return linearLoss(tp, autograd.Const(x), w, nil)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tp := &autograd.Tape{NoGrad: c.noGrad}
			p := autograd.Param(w)
			l := c.loss(tp, p)
			if c.noGrad && l.RequiresGrad() {
				t.Error("a NoGrad tape recorded the loss as requiring a gradient")
			}
			err := tp.Backward(l)
			if err == nil || errors.Is(err, autograd.ErrNotScalar) != c.notScalar {
				t.Errorf("Backward: %v (want ErrNotScalar: %v)", err, c.notScalar)
			}
			if p.Grad != nil {
				t.Errorf("parameter got gradient %v", p.Grad)
			}
		})
	}
}

// TestOnBackward: Backward calls each hook when its replay reaches the
// point it was recorded at, whether or not a gradient flows there: after
// the backward of every later op (w2's gradient exists at the first hook
// reached, w1's does not), before any earlier one; an error ends Backward.
func TestOnBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	x := autograd.Const(randn(rng, 2, 4))
	w1, w2 := autograd.Param(randn(rng, 4, 4)), autograd.Param(randn(rng, 4, 4))
	var order []string
	record := func(tp *autograd.Tape, name string) {
		tp.OnBackward(func() error {
			order = append(order, fmt.Sprintf("%s w1:%v w2:%v", name, w1.Grad != nil, w2.Grad != nil))
			return nil
		})
	}
	var tp autograd.Tape
	record(&tp, "start") // before any op: no gradient flows into this point
	h := tp.Linear(x, w1, nil)
	record(&tp, "middle")
	loss := linearLoss(&tp, h, w2, nil)
	record(&tp, "end")
	if err := tp.Backward(loss); err != nil {
		t.Fatal(err)
	}
	want := []string{"end w1:false w2:false", "middle w1:false w2:true", "start w1:true w2:true"}
	if !slices.Equal(order, want) {
		t.Errorf("hooks ran as %q; want %q", order, want)
	}

	boom := errors.New("boom")
	tp.OnBackward(func() error { return boom })
	loss = linearLoss(&tp, x, w1, nil)
	if err := tp.Backward(loss); !errors.Is(err, boom) {
		t.Errorf("Backward with a failing hook: %v; want %v", err, boom)
	}
	tp.NoGrad = true
	tp.OnBackward(func() error { t.Error("a NoGrad tape ran a hook"); return nil })
	tp.NoGrad = false
	if err := tp.Backward(linearLoss(&tp, x, w1, nil)); err != nil {
		t.Fatal(err)
	}
}

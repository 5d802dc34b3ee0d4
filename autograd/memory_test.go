package autograd_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// TestPassReturnsToPool: what GELU and LayerNorm save for backward (Φ(x),
// mean and rstd) goes back to the tensor pool when no backward will read
// it: under NoGrad, for inputs that need no gradient, for a branch the
// loss does not use, and for a pass Reset without Backward; with Recycle,
// Reset frees the results of such a pass too.
func TestPassReturnsToPool(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	x, w, b := randn(rng, 4, 6), randn(rng, 6), randn(rng, 6)
	forward := func(tp *autograd.Tape, x *autograd.Var) (gelu, norm *autograd.Var) {
		return tp.GELU(x), tp.LayerNorm(x, autograd.Const(w), autograd.Const(b), 1e-5)
	}
	free := func(vs ...*autograd.Var) {
		for _, v := range vs {
			tensor.Free(v.Value)
		}
	}
	for _, c := range []struct {
		name string
		pass func(tp *autograd.Tape)
	}{
		{"NoGrad", func(tp *autograd.Tape) {
			tp.NoGrad = true
			free(forward(tp, autograd.Const(x)))
		}},
		{"constant inputs", func(tp *autograd.Tape) {
			free(forward(tp, autograd.Const(x)))
			tp.Reset()
		}},
		{"unused branch", func(tp *autograd.Tape) {
			tp.Recycle = true // frees the results, LayerNorm's too
			p := autograd.Param(x)
			gelu, _ := forward(tp, p)
			if err := tp.Backward(scalarize(tp, gelu)); err != nil {
				t.Fatal(err)
			}
			tensor.Free(p.Grad)
		}},
		{"Reset without Backward", func(tp *autograd.Tape) {
			free(forward(tp, autograd.Param(x)))
			tp.Reset()
		}},
		{"NoGrad, Recycle", func(tp *autograd.Tape) {
			tp.NoGrad, tp.Recycle = true, true // Reset frees the results
			forward(tp, autograd.Const(x))
			tp.Reset()
		}},
		{"Recycle, Reset without Backward", func(tp *autograd.Tape) {
			tp.Recycle = true
			forward(tp, autograd.Param(x))
			tp.Reset()
		}},
	} {
		var tp autograd.Tape
		c.pass(&tp) // fills the free lists
		live := tensor.Memory().Live
		c.pass(&tp)
		if got := tensor.Memory().Live - live; got != 0 {
			t.Errorf("%s: a pass leaves %d bytes live", c.name, got)
		}
	}
}

// scope is a module whose forward opens its scope, runs two ops inside
// and returns a reshaped view of the last, as a model's layers do.
type scope struct{ w *autograd.Var }

func (s scope) Forward(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	x, exit := tp.Enter(s, x)
	h := tp.GELU(tp.Linear(x, s.w, nil))
	return exit(tp.Reshape(h, -1))
}

// TestNoGradScopesFree: an evaluation on a recycling tape keeps, of each
// module, only its output (here a view, whose storage must live on), and
// computes what a tape that keeps everything computes.
func TestNoGradScopesFree(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	x := autograd.Const(randn(rng, 4, 8))
	layers := []scope{{autograd.Param(randn(rng, 8, 8))}, {autograd.Param(randn(rng, 32, 8))}}
	run := func(tp *autograd.Tape) []float64 {
		h := layers[0].Forward(tp, x)
		return layers[1].Forward(tp, tp.Reshape(h, 4, 8)).Value.Float64s()
	}
	want := run(&autograd.Tape{NoGrad: true})
	tp := &autograd.Tape{NoGrad: true, Recycle: true}
	got := run(tp)
	if !slices.Equal(got, want) {
		t.Fatalf("recycling evaluation %v, keeping one %v", got, want)
	}
	// Left: each layer's GELU result under its reshape view, and the
	// reshape between the layers (a view, not counted).
	if n, b := tp.Retained(); n != 2 || b != int64(8*(4*8+4*32)) {
		t.Errorf("the pass holds %d tensors, %d bytes; want 2 (the layers' outputs), %d bytes", n, b, 8*(4*8+4*32))
	}
	tp.Reset()
}

// mlp is a module of which backward reads some results: x·w1ᵀ+b1 (GELU
// reads it), its GELU (the second Linear reads it) and the softmax of the
// residual sum (softmax's backward reads its result), returned as a view.
// The second Linear's result and the sum are read by nothing (Add's
// backward reads no value), so the module's exit frees them.
type mlp struct{ w1, b1, w2 *autograd.Var }

func newMLP(rng *rand.Rand) mlp {
	return mlp{autograd.Param(randn(rng, 16, 8)), autograd.Param(randn(rng, 16)), autograd.Param(randn(rng, 8, 16))}
}

func (m mlp) Forward(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	x, exit := tp.Enter(m, x)
	h := tp.GELU(tp.Linear(x, m.w1, m.b1))              // (4, 16)
	p := tp.Softmax(tp.Add(tp.Linear(h, m.w2, nil), x)) // (4, 8)
	return exit(tp.Reshape(p, 4, 8))
}

// stack is a module of two mlps, each checkpointed if the tape selects it.
type stack [2]mlp

func (s stack) Forward(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	x, exit := tp.Enter(s, x)
	return exit(tp.Checkpoint(s[1], tp.Checkpoint(s[0], x)))
}

// TestModulesKeepWhatBackwardReads: as a module returns, the tape frees
// its results that neither its output shows nor a backward reads, as
// PyTorch frees a tensor nothing refers to, and the gradients are bit for
// bit those of a tape that keeps every result. The buffers freed are
// handed out again and overwritten before backward, so that a backward
// reading one would differ (and read NaN under -tags weftpoison).
func TestModulesKeepWhatBackwardReads(t *testing.T) {
	const f64 = 8
	for _, c := range []struct {
		name      string
		layer     autograd.Layer
		recompute bool
		kept      int // results held when the forward ends, each (4, 8) or (4, 16)
		keptBytes int64
	}{
		// h, GELU(h) and the softmax.
		{"module", newMLP(rand.New(rand.NewPCG(5, 5))), false, 3, f64 * (64 + 64 + 32)},
		// The same of each mlp: the first's softmax, the second's input, stays.
		{"nested modules", stack{newMLP(rand.New(rand.NewPCG(5, 6))), newMLP(rand.New(rand.NewPCG(5, 7)))}, false, 6, 2 * f64 * (64 + 64 + 32)},
		// Each checkpoint keeps its output, the first's read by the second's
		// recompute.
		{"checkpointed modules", stack{newMLP(rand.New(rand.NewPCG(5, 6))), newMLP(rand.New(rand.NewPCG(5, 7)))}, true, 2, 2 * f64 * 32},
	} {
		x := autograd.Param(randn(rand.New(rand.NewPCG(1, 2)), 4, 8))
		params := append([]*autograd.Var{x}, paramsOf(c.layer)...)
		pass := func(recycle bool) (grads [][]float64) {
			tp := &autograd.Tape{Recycle: recycle}
			if c.recompute {
				tp.Recompute = func(autograd.Layer) bool { return true }
			}
			y := c.layer.Forward(tp, x)
			if recycle {
				if n, b := tp.Retained(); n != c.kept || b != c.keptBytes {
					t.Errorf("%s: the forward leaves %d results, %d bytes; want %d, %d bytes", c.name, n, b, c.kept, c.keptBytes)
				}
			}
			var junk []*tensor.Tensor // takes the buffers freed
			for range 8 {
				j := tensor.New(dtype.F64, 4, 8)
				j.Fill(1e300)
				junk = append(junk, j)
			}
			if err := tp.Backward(scalarize(tp, y)); err != nil {
				t.Fatal(err)
			}
			for _, j := range junk {
				tensor.Free(j)
			}
			for _, p := range params {
				grads = append(grads, p.Grad.Float64s())
				tensor.Free(p.Grad)
				p.Grad = nil
			}
			return grads
		}
		want, got := pass(false), pass(true)
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Errorf("%s: gradient %d differs from a tape that keeps every result:\n%v\n%v", c.name, i, got[i], want[i])
			}
		}
	}
}

// paramsOf lists an mlp's or a stack's parameters.
func paramsOf(l autograd.Layer) []*autograd.Var {
	switch l := l.(type) {
	case mlp:
		return []*autograd.Var{l.w1, l.b1, l.w2}
	case stack:
		return append(paramsOf(l[0]), paramsOf(l[1])...)
	}
	return nil
}

// square is a module computing x∘x + x, the square a custom op whose
// backward reads its input; the sum (an Add, which reads nothing) is
// returned, so only record decides whether the square stays.
type square struct {
	record func(tp *autograd.Tape, y *tensor.Tensor, bwd func(*tensor.Tensor) []*tensor.Tensor, x *autograd.Var) *autograd.Var
}

func (s square) Forward(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	x, exit := tp.Enter(s, x)
	y := s.record(tp, tensor.Mul(x.Value, x.Value), func(dy *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{tensor.Mul(tensor.Scale(x.Value, 2), dy)}
	}, x)
	return exit(tp.Add(y, x))
}

// TestRecordInputsFreesResult: a custom op recorded with RecordInputs keeps
// its inputs for backward but not its result, which the module's exit
// frees, where Record keeps both; the gradients are the same bits.
func TestRecordInputsFreesResult(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	x0 := randn(rng, 4, 8)
	const bytes = 4 * 8 * 8
	for _, c := range []struct {
		name   string
		record func(tp *autograd.Tape, y *tensor.Tensor, bwd func(*tensor.Tensor) []*tensor.Tensor, x *autograd.Var) *autograd.Var
		kept   int64
	}{
		{"Record", func(tp *autograd.Tape, y *tensor.Tensor, bwd func(*tensor.Tensor) []*tensor.Tensor, x *autograd.Var) *autograd.Var {
			return tp.Record(y, bwd, x)
		}, 2 * bytes},
		{"RecordInputs", func(tp *autograd.Tape, y *tensor.Tensor, bwd func(*tensor.Tensor) []*tensor.Tensor, x *autograd.Var) *autograd.Var {
			return tp.RecordInputs(y, bwd, x)
		}, bytes},
	} {
		tp := &autograd.Tape{Recycle: true}
		x := autograd.Param(x0.Clone())
		out := square{c.record}.Forward(tp, x)
		if _, b := tp.Retained(); b != c.kept {
			t.Errorf("%s: the pass holds %d bytes, want %d", c.name, b, c.kept)
		}
		if err := tp.Backward(scalarize(tp, out)); err != nil {
			t.Fatal(err)
		}
		w, xs, g := weights(x0.Len()).Float64s(), x0.Float64s(), x.Grad.Float64s()
		for i := range g {
			if want := w[i]*(2*xs[i]) + w[i]; g[i] != want {
				t.Fatalf("%s: gradient %d = %v, want %v", c.name, i, g[i], want)
			}
		}
	}
}

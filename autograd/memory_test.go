package autograd_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weftml/weft/autograd"
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

package autograd_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// linearIn casts the inputs of linear to float32, as autocast does.
type linearIn struct{}

func (linearIn) CastInput(op autograd.Op, in dtype.DType) dtype.DType {
	if op == autograd.OpLinear {
		return dtype.F32
	}
	return in
}

// block is a module for checkpointing: a residual MLP whose result is a
// view (a reshape) of its last op's, and which counts its forward passes.
type block struct {
	w1, b1, g, beta, w2 *autograd.Var
	runs, recomputes    int
}

func newBlock(rng *rand.Rand) *block {
	p := func(shape ...int) *autograd.Var { return autograd.Param(randn(rng, shape...)) }
	return &block{w1: p(16, 8), b1: p(16), g: p(16), beta: p(16), w2: p(8, 16)}
}

func (b *block) Forward(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	b.runs++
	if tp.Recomputing() {
		b.recomputes++
	}
	h := tp.GELU(tp.Linear(x, b.w1, b.b1))                                        // (4, 16)
	h = tp.LayerNorm(h, b.g, b.beta, 1e-5)                                        // (4, 16)
	return tp.Reshape(tp.Add(tp.Cast(tp.Linear(h, b.w2, nil), dtype.F64), x), 32) // (32)
}

// checkpointRun is one pass over the block with x also read after it (so
// that x's gradient sums contributions from outside and inside), under a
// Caster that is gone by backward, as the fabric's scope is.
type checkpointRun struct {
	grads            [][]float64 // x's, then each parameter's
	retained         int
	retainedBytes    int64
	runs, recomputes int
}

func runBlock(t *testing.T, recompute bool) checkpointRun {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	b := newBlock(rng)
	x := autograd.Param(randn(rng, 4, 8))
	tp := &autograd.Tape{Recycle: true, Caster: linearIn{}}
	if recompute {
		tp.Recompute = func(l autograd.Layer) bool { return l == b }
	}
	y := tp.Checkpoint(b, x)
	s := tp.Add(y, tp.Reshape(x, 32))
	loss := scalarize(tp, s)
	var r checkpointRun
	r.retained, r.retainedBytes = tp.Retained()
	tp.Caster = nil
	if err := tp.Backward(loss); err != nil {
		t.Fatal(err)
	}
	for _, v := range []*autograd.Var{x, b.w1, b.b1, b.g, b.beta, b.w2} {
		r.grads = append(r.grads, v.Grad.Float64s())
	}
	r.runs, r.recomputes = b.runs, b.recomputes
	return r
}

// TestCheckpointIsExact: a checkpointed module gives every gradient bit
// for bit as without the checkpoint, recomputing its forward once in the
// autocast it first ran in, while the tape holds only its result.
func TestCheckpointIsExact(t *testing.T) {
	plain, ckpt := runBlock(t, false), runBlock(t, true)
	for i := range plain.grads {
		if !slices.Equal(plain.grads[i], ckpt.grads[i]) {
			t.Errorf("gradient %d differs with the checkpoint:\n%v\n%v", i, plain.grads[i], ckpt.grads[i])
		}
	}
	if plain.runs != 1 || plain.recomputes != 0 || ckpt.runs != 2 || ckpt.recomputes != 1 {
		t.Errorf("forward runs (recomputes): %d (%d) plain, %d (%d) checkpointed; want 1 (0) and 2 (1)", plain.runs, plain.recomputes, ckpt.runs, ckpt.recomputes)
	}
	// Outside the block the tape holds the sum and the product with the
	// weighting; inside (which opens no module scope to free results at),
	// 13 tensors: the autocast casts of x, w1, b1, w2 and h, the Linears'
	// results, GELU's, LayerNorm's and its mean and rstd, the cast and the
	// sum. The checkpoint keeps the sum alone, which the block's result (a
	// reshape) shows.
	if plain.retained != 2+13 || ckpt.retained != 2+1 {
		t.Errorf("the tape holds %d tensors without the checkpoint, %d with it; want 15 and 3", plain.retained, ckpt.retained)
	}
	if ckpt.retainedBytes >= plain.retainedBytes {
		t.Errorf("held %d bytes with the checkpoint, %d without", ckpt.retainedBytes, plain.retainedBytes)
	}
}

// identity is a Layer that returns its input.
type identity struct{}

func (identity) Forward(_ *autograd.Tape, x *autograd.Var) *autograd.Var { return x }

// TestCheckpointOfItsInput: a module that returns its input unchanged has
// nothing to recompute, and gradients flow through it.
func TestCheckpointOfItsInput(t *testing.T) {
	x := autograd.Param(tensor.FromFloat64([]float64{1, 2}, 2))
	tp := &autograd.Tape{Recycle: true, Recompute: func(autograd.Layer) bool { return true }}
	y := tp.Checkpoint(identity{}, x)
	if err := tp.Backward(scalarize(tp, tp.Scale(y, 3))); err != nil {
		t.Fatal(err)
	}
	want := weights(2).Float64s()
	for i := range want {
		want[i] *= 3
	}
	if got := x.Grad.Float64s(); !slices.Equal(got, want) {
		t.Errorf("gradient %v, want %v", got, want)
	}
}

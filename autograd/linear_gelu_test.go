package autograd_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// casts is a Caster that casts the inputs of the ops it lists.
type casts map[autograd.Op]dtype.DType

func (c casts) CastInput(op autograd.Op, in dtype.DType) dtype.DType {
	if dt, ok := c[op]; ok {
		return dt
	}
	return in
}

// TestLinearGELU checks that LinearGELU gives what Linear, the scope's
// exit and GELU give op by op, bit for bit: the output, and the gradients
// of x, w and b after a loss over it. It runs every float dtype, bf16
// autocast of the linear (bf16-mixed's rounding point: GELU sees the bf16
// output), and the cases where the GELU must run on its own: autocast
// moving GELU to float32, and an exit that casts the output.
func TestLinearGELU(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	x0, w0, b0 := randn(rng, 2, 6, 24), randn(rng, 40, 24), randn(rng, 40)
	targets := randomTargets(rng, 12, 40)
	toF32 := func(tp *autograd.Tape) func(*autograd.Var) *autograd.Var {
		return func(v *autograd.Var) *autograd.Var { return tp.Cast(v, dtype.F32) }
	}
	identity := func(*autograd.Tape) func(*autograd.Var) *autograd.Var {
		return func(v *autograd.Var) *autograd.Var { return v }
	}
	for _, c := range []struct {
		params dtype.DType
		caster autograd.Caster
		exit   func(*autograd.Tape) func(*autograd.Var) *autograd.Var
	}{
		{dtype.F64, nil, identity}, {dtype.F32, nil, identity}, {dtype.BF16, nil, identity}, {dtype.F16, nil, identity},
		{dtype.F32, casts{autograd.OpLinear: dtype.BF16}, identity},
		{dtype.F32, casts{autograd.OpLinear: dtype.F16}, identity},
		{dtype.F32, casts{autograd.OpLinear: dtype.BF16, autograd.OpGELU: dtype.F32}, identity},
		{dtype.F32, casts{autograd.OpLinear: dtype.BF16}, toF32},
	} {
		name := fmt.Sprintf("%v/%v", c.params, c.caster)
		run := func(fused bool) []*tensor.Tensor {
			tp := &autograd.Tape{Caster: c.caster}
			x, w, b := autograd.Param(x0.To(c.params)), autograd.Param(w0.To(c.params)), autograd.Param(b0.To(c.params))
			var y *autograd.Var
			if fused {
				y = tp.LinearGELU(x, w, b, c.exit(tp))
			} else {
				y = tp.GELU(c.exit(tp)(tp.Linear(x, w, b)))
			}
			out := tensor.FromFloat64(y.Value.Float64s(), y.Value.Shape()...).To(y.Value.DType()) // a copy that outlives the tape
			loss, err := tp.CrossEntropy(tp.Reshape(y, 12, 40), targets)
			if err != nil {
				t.Fatal(err)
			}
			if err := tp.Backward(loss); err != nil {
				t.Fatal(err)
			}
			return []*tensor.Tensor{out, x.Grad, w.Grad, b.Grad}
		}
		got, want := run(true), run(false)
		for i, what := range []string{"output", "x's gradient", "w's gradient", "b's gradient"} {
			if g, w := got[i], want[i]; g.DType() != w.DType() || !bytes.Equal(g.Data(), w.Data()) {
				t.Errorf("%s: %s is %v and differs from the op-by-op %v", name, what, g.DType(), w.DType())
			}
		}
	}
}

// randomTargets returns n class indices below classes.
func randomTargets(rng *rand.Rand, n, classes int) []int {
	targets := make([]int, n)
	for i := range targets {
		targets[i] = rng.IntN(classes)
	}
	return targets
}

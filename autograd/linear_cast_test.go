package autograd_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// TestLinearAutocastGradients checks that a linear whose inputs autocast
// casts hands their gradients straight to the float32 sources, bit for bit
// what the casts' own backward gives: the same graph with the casts made
// by hand, and no Caster. It covers bf16 and f16 autocast, a source that
// also reaches the loss another way (a residual), a linear of x with
// itself (whose gradient must not skip its cast), and two passes
// accumulating into the same gradients.
func TestLinearAutocastGradients(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	x0, w0, b0 := randn(rng, 2, 12, 24), randn(rng, 24, 24), randn(rng, 24)
	targets := randomTargets(rng, 24, 24)
	for _, dt := range []dtype.DType{dtype.BF16, dtype.F16} {
		for _, c := range []struct {
			name  string
			model func(tp *autograd.Tape, linear func(x, w, b *autograd.Var) *autograd.Var, x, w, b *autograd.Var) *autograd.Var
		}{
			{"linear", func(tp *autograd.Tape, linear func(x, w, b *autograd.Var) *autograd.Var, x, w, b *autograd.Var) *autograd.Var {
				return linear(x, w, b)
			}},
			{"residual", func(tp *autograd.Tape, linear func(x, w, b *autograd.Var) *autograd.Var, x, w, b *autograd.Var) *autograd.Var {
				return tp.Add(tp.Cast(linear(x, w, b), dtype.F32), x)
			}},
			{"self", func(tp *autograd.Tape, linear func(x, w, b *autograd.Var) *autograd.Var, x, w, b *autograd.Var) *autograd.Var {
				return tp.Add(tp.Cast(linear(x, w, b), dtype.F32), tp.Reshape(tp.Cast(linear(w, w, nil), dtype.F32), 2, 12, 24))
			}},
		} {
			run := func(auto bool) []*tensor.Tensor {
				x, w, b := autograd.Param(x0.To(dtype.F32)), autograd.Param(w0.To(dtype.F32)), autograd.Param(b0.To(dtype.F32))
				for range 2 {
					tp := &autograd.Tape{}
					linear := func(x, w, b *autograd.Var) *autograd.Var {
						if b != nil {
							b = tp.Cast(b, dt)
						}
						return tp.Linear(tp.Cast(x, dt), tp.Cast(w, dt), b)
					}
					if auto {
						tp.Caster = casts{autograd.OpLinear: dt}
						linear = tp.Linear
					}
					y := c.model(tp, linear, x, w, b)
					loss, err := tp.CrossEntropy(tp.Reshape(tp.Cast(y, dtype.F32), -1, 24), targets[:tensor.Numel(y.Value.Shape())/24])
					if err != nil {
						t.Fatal(err)
					}
					if err := tp.Backward(loss); err != nil {
						t.Fatal(err)
					}
				}
				return []*tensor.Tensor{x.Grad, w.Grad, b.Grad}
			}
			got, want := run(true), run(false)
			for i, what := range []string{"x", "w", "b"} {
				if g, w := got[i], want[i]; (g == nil) != (w == nil) || g != nil && (g.DType() != w.DType() || !bytes.Equal(g.Data(), w.Data())) {
					t.Errorf("%v/%s: %s's gradient differs from the one through explicit casts", dt, c.name, what)
				}
			}
		}
	}
}

// TestLinearAutocastKeepsNoWeightCopy checks that a linear under bf16 or
// f16 autocast holds no low-precision copy of its float32 weight from
// forward to backward: the GEMMs round the weight while packing.
func TestLinearAutocastKeepsNoWeightCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	for _, dt := range []dtype.DType{dtype.BF16, dtype.F16} {
		x, w := autograd.Param(randn(rng, 4, 256).To(dtype.F32)), autograd.Param(randn(rng, 256, 256).To(dtype.F32))
		tp := &autograd.Tape{Caster: casts{autograd.OpLinear: dt}}
		before := tensor.Memory().Live
		y := tp.Linear(x, w, nil)
		const copyBytes = 256 * 256 * 2
		if grew := tensor.Memory().Live - before; grew >= copyBytes {
			t.Errorf("%v: the forward left %d bytes live, at least a copy of the weight (%d)", dt, grew, copyBytes)
		}
		loss, err := tp.CrossEntropy(tp.Cast(y, dtype.F32), []int{1, 2, 3, 4})
		if err != nil {
			t.Fatal(err)
		}
		if err := tp.Backward(loss); err != nil {
			t.Fatal(err)
		}
		if w.Grad == nil || w.Grad.DType() != dtype.F32 {
			t.Fatalf("%v: w's gradient is %v, want float32", dt, w.Grad)
		}
	}
}

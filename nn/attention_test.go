package nn_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/tensor"
)

// attentionPass runs a's forward and backward for x under caster and
// returns the output and the gradients of x and of a's parameters, all in
// float64, with Σ out·r (r fixed and random) as the loss.
func attentionPass(t *testing.T, a *nn.CausalSelfAttention, caster autograd.Caster, x *tensor.Tensor) (out []float64, grads [][]float64) {
	t.Helper()
	tp := &autograd.Tape{Caster: caster}
	xv := autograd.Param(x)
	y := a.Forward(tp, xv)
	out = y.Value.Float64s()
	r := make([]float64, len(out))
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range r {
		r[i] = rng.NormFloat64()
	}
	flat := tp.Reshape(y, 1, len(out))
	rv := autograd.Const(tensor.FromFloat64(r, 1, len(r)).To(y.Value.DType()))
	if err := tp.Backward(tp.Linear(flat, rv, nil)); err != nil {
		t.Fatal(err)
	}
	grads = append(grads, xv.Grad.Float64s())
	for _, p := range nn.Parameters(a) {
		grads = append(grads, p.Var.Grad.Float64s())
		p.Var.Grad = nil
	}
	return out, grads
}

// maxRelDiff is max|got-want| over max|want|.
func maxRelDiff(got, want []float64) float64 {
	var diff, scale float64
	for i, w := range want {
		diff = max(diff, math.Abs(got[i]-w))
		scale = max(scale, math.Abs(w))
	}
	return diff / scale
}

// The fused attention computes what the op-by-op path computes, in every
// precision the engine runs attention in: to 1e-9 in float64, at float32
// rounding in float32 and within a few ulps of bf16/f16 where those
// round (the same rounding points; the sums run in another order, which
// moves some values across a rounding boundary). Sequences cover one
// partial tile, several tiles with a ragged last one, and exact tiles.
func TestFusedAttentionMatchesOpByOp(t *testing.T) {
	cases := []struct {
		name     string
		autocast string      // the spec whose autocast the tape runs under; "" for none
		dt       dtype.DType // the dtype of x and the parameters
		tol      float64
		seqs     []int
	}{
		{"64-true", "", dtype.F64, 1e-9, []int{5, 150, 128}},
		{"32-true", "", dtype.F32, 2e-6, []int{5, 150}},
		{"bf16-mixed", "bf16-mixed", dtype.F32, 8e-3, []int{5, 64, 150}},
		{"16-mixed", "16-mixed", dtype.F32, 2e-3, []int{5, 64, 150}},
		{"bf16-true", "", dtype.BF16, 8e-3, []int{5, 64, 150}},
		{"16-true", "", dtype.F16, 2e-3, []int{5, 64, 150}},
	}
	const width, heads = 24, 3
	for _, c := range cases {
		var caster autograd.Caster
		if c.autocast != "" {
			p, err := precision.Parse(c.autocast, precision.Options{})
			if err != nil {
				t.Fatal(err)
			}
			caster = precision.Autocast(p)
		}
		for _, seq := range c.seqs {
			a := nn.NewCausalSelfAttention(nn.NewInit(1), width, heads)
			for _, p := range nn.Parameters(a) {
				p.Var.Value = p.Var.Value.To(c.dt)
			}
			rng := rand.New(rand.NewPCG(1, uint64(seq)))
			vals := make([]float64, 2*seq*width)
			for i := range vals {
				vals[i] = rng.NormFloat64()
			}
			x := tensor.FromFloat64(vals, 2, seq, width).To(c.dt)
			a.OpByOp = true
			wantOut, wantGrads := attentionPass(t, a, caster, x)
			a.OpByOp = false
			gotOut, gotGrads := attentionPass(t, a, caster, x)
			tol := c.tol
			if rounded := c.dt != dtype.F64 && c.dt != dtype.F32 || caster != nil; rounded && seq < 8 {
				tol = 0 // a few keys: the same sums in the same order, bit for bit
			}
			if d := maxRelDiff(gotOut, wantOut); d > tol {
				t.Errorf("%s T=%d: output differs from op by op by %.3g (relative), want ≤ %g", c.name, seq, d, tol)
			}
			for i, g := range gotGrads {
				if d := maxRelDiff(g, wantGrads[i]); d > tol {
					t.Errorf("%s T=%d: gradient %d differs from op by op by %.3g (relative), want ≤ %g", c.name, seq, i, d, tol)
				}
			}
		}
	}
}

// BenchmarkCausalAttention times a forward and backward pass of the
// attention between the projections (nn.CausalAttention over qkv), op by
// op and fused in turn in the same run, at T=256 with 6 heads of 64, and
// reports the median of each and of their ratio.
func BenchmarkCausalAttention(b *testing.B) {
	const batch, seq, width, heads = 4, 256, 384, 6
	for _, spec := range []string{"32-true", "bf16-mixed"} {
		b.Run(spec, func(b *testing.B) {
			p, err := precision.Parse(spec, precision.Options{})
			if err != nil {
				b.Fatal(err)
			}
			caster := precision.Autocast(p)
			rng := rand.New(rand.NewPCG(1, 2))
			vals := make([]float64, batch*seq*3*width)
			for i := range vals {
				vals[i] = rng.NormFloat64()
			}
			dt := dtype.F32 // qkv in the dtype the Linear computes it in
			if caster != nil {
				dt = caster.CastInput(autograd.OpLinear, dt)
			}
			qkv := autograd.Param(tensor.FromFloat64(vals, batch, seq, 3*width).To(dt))
			ones := autograd.Const(tensor.New(qkv.Value.DType(), 1, batch*seq*width))
			ones.Value.Fill(1)
			pass := func(opByOp bool) time.Duration {
				start := time.Now()
				tp := &autograd.Tape{Caster: caster, Recycle: true}
				y := nn.CausalAttention(tp, qkv, heads, opByOp)
				if err := tp.Backward(tp.Linear(tp.Reshape(y, 1, y.Value.Len()), ones, nil)); err != nil {
					b.Fatal(err)
				}
				tensor.Free(qkv.Grad)
				qkv.Grad = nil
				return time.Since(start)
			}
			pass(true)
			pass(false)
			// Medians of interleaved passes, which a busy machine's bursts
			// move less than sums.
			var opByOp, fused, ratio []float64
			for b.Loop() {
				o, f := pass(true), pass(false)
				opByOp, fused, ratio = append(opByOp, float64(o)/1e6), append(fused, float64(f)/1e6), append(ratio, float64(o)/float64(f))
			}
			b.ReportMetric(median(opByOp), "opbyop-ms")
			b.ReportMetric(median(fused), "fused-ms")
			b.ReportMetric(median(ratio), "speedup")
		})
	}
}

func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

package fabric_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/strategy"
	"github.com/weftml/weft/tensor"
)

// TestClipNormByHand: TrainStep with Config.ClipNorm steps SGD with the
// gradients of one backward multiplied by clip/(norm+1e-6), norm their
// global L2 norm summed by hand, as clip_grad_norm_ does, and reports
// that norm.
func TestClipNormByHand(t *testing.T) {
	const lr, clip = 0.5, 0.05
	b := f64Batches(1, 8)[0]
	sgd := func(cfg fabric.Config) (*fabric.Fabric, *models.MLP) {
		m := models.NewMLP(nn.NewInit(1))
		cfg.Precision = precision.Pure{DType: dtype.F64}
		f := newFabric(t, cfg)
		if err := f.Setup(m, optim.NewSGD(nn.Parameters(m), lr)); err != nil {
			t.Fatal(err)
		}
		return f, m
	}
	f, ref := sgd(fabric.Config{})
	fabricLoss(t, f, ref, b)
	var sq float64
	for _, p := range nn.Parameters(ref) {
		for _, g := range p.Var.Grad.Float64s() {
			sq += g * g
		}
	}
	norm := math.Sqrt(sq)
	if norm <= 2*clip {
		t.Fatalf("gradient norm %v: the test needs one above %v", norm, 2*clip)
	}
	want := map[string][]float64{}
	for _, p := range nn.Parameters(ref) {
		w, g := p.Var.Value.Float64s(), p.Var.Grad.Float64s()
		for i := range w {
			w[i] -= lr * g[i] * (clip / (norm + 1e-6))
		}
		want[p.Path] = w
	}

	f, m := sgd(fabric.Config{ClipNorm: clip})
	res, err := f.TrainStep(context.Background(), m, b)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(res.GradNorm-norm) > 1e-12*norm {
		t.Errorf("GradNorm %v, by hand %v", res.GradNorm, norm)
	}
	got := map[string][]float64{}
	for _, p := range nn.Parameters(m) {
		got[p.Path] = p.Var.Value.Float64s()
	}
	if d := relDiff(t, got, want); d > 1e-12 {
		t.Errorf("weights differ from those clipped and stepped by hand by %g relative", d)
	}
}

// TestClipNormAcrossRanks: clipping to a norm the gradients exceed trains,
// under every strategy on 2 ranks and with accumulation, the weights and
// norms of one device, to 1e-9: the norm is over every rank's chunks.
func TestClipNormAcrossRanks(t *testing.T) {
	const clip = 0.05
	bs := f64Batches(3, 8)
	want := trainAccumulating(t, "single", 1, fabric.Config{ClipNorm: clip}, bs)
	unclipped := trainAccumulating(t, "single", 1, fabric.Config{}, bs)
	if d := relDiff(t, want.params, unclipped.params); d < 1e-6 {
		t.Fatalf("clipping to %v changed the weights by %g relative: the test needs it to clip", clip, d)
	}
	for s, n := range want.norms[0] {
		if !(n > clip) {
			t.Fatalf("step %d: norm %v, not above the clip %v", s, n, clip)
		}
	}
	for _, st := range strategy.Names() {
		n := 2
		if st == "single" {
			n = 1
		}
		t.Run(st, func(t *testing.T) {
			got := trainAccumulating(t, st, n, fabric.Config{ClipNorm: clip, Accumulation: fabric.Accumulation{MicroBatches: 2}}, bs)
			if d := relDiff(t, got.params, want.params); d > 1e-9 {
				t.Errorf("weights differ from one device's by %g relative", d)
			}
			for r := range n {
				for s, g := range got.norms[r] {
					if w := want.norms[0][s]; math.Abs(g-w) > 1e-9*w {
						t.Errorf("rank %d step %d: norm %v, one device %v", r, s, g, w)
					}
				}
			}
		})
	}
}

// TestClipNormSkippedStep: a step the loss scaler skips (a NaN input
// makes every gradient NaN) is not clipped: TrainStep reports no norm,
// the weights stay and the scale halves; ClipGradNorm leaves gradients
// with an inf as they are, the finite ones unscaled, not zeroed.
func TestClipNormSkippedStep(t *testing.T) {
	const scale = 512
	m := models.NewMLP(nn.NewInit(1))
	f := newFabric(t, fabric.Config{Precision: newScaleOnly(scale), ClipNorm: 0.05})
	opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Setup(m, opt); err != nil {
		t.Fatal(err)
	}
	b := batches(1)[0]
	x := b.X.Float32s()
	x[0] = float32(math.NaN())
	b.X = tensor.FromFloat32(x, b.X.Shape()...)
	before := nn.Parameters(m)[0].Var.Value.Float32s()
	res, err := f.TrainStep(context.Background(), m, b)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Skipped || res.GradNorm != 0 {
		t.Errorf("TrainStep on a NaN batch: skipped %v, norm %v; want skipped, norm 0", res.Skipped, res.GradNorm)
	}
	if fmt.Sprint(nn.Parameters(m)[0].Var.Value.Float32s()) != fmt.Sprint(before) {
		t.Errorf("a skipped step changed %s", nn.Parameters(m)[0].Path)
	}
	if f.LossScale() != scale/2 {
		t.Errorf("LossScale() = %v after a skipped step, want %v", f.LossScale(), scale/2)
	}

	p := newPair(scale)
	f = newFabric(t, fabric.Config{Precision: newScaleOnly(scale)})
	if err := f.Setup(p, optim.NewSGD(nn.Parameters(p), 1)); err != nil {
		t.Fatal(err)
	}
	p.A.Grad = tensor.FromFloat32([]float32{float32(math.Inf(1)), 4 * scale}, 2)
	norm, err := f.ClipGradNorm(1)
	if err != nil || !math.IsInf(norm, 1) {
		t.Fatalf("ClipGradNorm(1) = %v, %v; want +Inf", norm, err)
	}
	if g := p.A.Grad.Float32s(); g[1] != 4 || p.B.Grad.Float32s()[0] != 12 {
		t.Errorf("ClipGradNorm of a step the scaler skips clipped the gradients: %v %v", g, p.B.Grad.Float32s())
	}
}

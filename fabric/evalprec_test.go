package fabric_test

import (
	"context"
	"strings"
	"testing"

	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
)

// TestEvalPrecision: a model trained in bf16-mixed and evaluated with
// EvalPrecision 32-true gives, bit for bit, the val loss a 32-true fabric
// gives on the same weights, and not the bf16-mixed one; training itself
// is unchanged by it.
func TestEvalPrecision(t *testing.T) {
	ctx := context.Background()
	bs := batches(3)
	trainMixed := func(eval precision.Plugin) (*fabric.Fabric, *models.MLP) {
		m := newMLP()
		f := newFabric(t, fabric.Config{Precision: mustParse(t, "bf16-mixed"), EvalPrecision: eval})
		opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Setup(m, opt); err != nil {
			t.Fatal(err)
		}
		for _, b := range bs[:2] {
			if _, err := f.TrainStep(ctx, m, b); err != nil {
				t.Fatal(err)
			}
		}
		return f, m
	}
	f, m := trainMixed(mustParse(t, "32-true"))
	plain, pm := trainMixed(nil)
	sameParams(t, m, pm)
	got, err := f.EvalLoss(ctx, m, bs[2])
	if err != nil {
		t.Fatal(err)
	}
	mixed, err := plain.EvalLoss(ctx, pm, bs[2])
	if err != nil {
		t.Fatal(err)
	}

	// The reference: a 32-true fabric over a copy of the trained weights.
	ref := newMLP()
	for i, p := range nn.Parameters(ref) {
		p.Var.Value = nn.Parameters(m)[i].Var.Value.Clone()
	}
	rf := newFabric(t, fabric.Config{Precision: mustParse(t, "32-true")})
	opt, err := optim.NewAdamW(nn.Parameters(ref), adamW)
	if err != nil {
		t.Fatal(err)
	}
	if err := rf.Setup(ref, opt); err != nil {
		t.Fatal(err)
	}
	want, err := rf.EvalLoss(ctx, ref, bs[2])
	if err != nil {
		t.Fatal(err)
	}
	if got != want || got == mixed {
		t.Errorf("val loss in eval precision 32-true %v; a 32-true evaluation of the weights %v, bf16-mixed's %v", got, want, mixed)
	}
	// Training after an evaluation is still bf16-mixed's.
	if _, err := f.TrainStep(ctx, m, bs[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.TrainStep(ctx, pm, bs[0]); err != nil {
		t.Fatal(err)
	}
	sameParams(t, m, pm)
}

// TestEvalPrecisionRefused: Setup refuses, in one line, an eval
// precision that converts modules, one that stores weights in another
// dtype than training, and any after training converted modules.
func TestEvalPrecisionRefused(t *testing.T) {
	for _, c := range []struct{ train, eval, want string }{
		{"bf16-mixed", "bf16-mixed+fp8", "eval precision bf16-mixed+fp8 converts modules"},
		{"bf16-mixed", "nf4", "eval precision nf4 converts modules"},
		{"bf16-mixed", "bf16-true", "eval precision bf16-true computes over weights stored in bfloat16, and training stores fc1.weight in float32; evaluate in 32-true or a mixed spec"},
		{"bf16-true", "32-true", "training stores fc1.weight in bfloat16; evaluate in bf16-true or a mixed spec"},
		{"bf16-true+nf4", "bf16-mixed", "eval precision bf16-mixed: training's nf4 replaced the arithmetic of fc1"},
	} {
		m := newMLP()
		f := newFabric(t, fabric.Config{Precision: mustParse(t, c.train), EvalPrecision: mustParse(t, c.eval)})
		err := f.Setup(m, optim.NewSGD(nn.Parameters(m), 1))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("train %s, eval %s: %v; want one line with %q", c.train, c.eval, err, c.want)
		}
	}
	// A mixed spec over bf16 weights runs.
	m := newMLP()
	f := newFabric(t, fabric.Config{Precision: mustParse(t, "bf16-true"), EvalPrecision: mustParse(t, "bf16-mixed")})
	if err := f.Setup(m, optim.NewSGD(nn.Parameters(m), 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.EvalLoss(context.Background(), m, batches(1)...); err != nil {
		t.Fatal(err)
	}
}

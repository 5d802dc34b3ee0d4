package fabric_test

import (
	"math"
	"strings"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/dtype/dynamic"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/tensor"
)

// TestAdamW8bitState: under bf16-mixed+adamw8bit AdamW keeps each
// parameter's moments as int8 codes of its shape with a float32 absmax a
// block of 256, the losses of 30 steps on one batch stay finite and fall,
// and the pool holds at most 0.27 of the bytes float32 moments take.
func TestAdamW8bitState(t *testing.T) {
	m := newMLP()
	opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
	if err != nil {
		t.Fatal(err)
	}
	f := newFabric(t, fabric.Config{Precision: mustParse(t, "bf16-mixed+adamw8bit")})
	if err := f.Setup(m, opt); err != nil {
		t.Fatal(err)
	}
	b := batches(1)[0]
	var first, last float64
	for i := range 30 {
		last = fabricLoss(t, f, m, b)
		if math.IsNaN(last) || math.IsInf(last, 0) {
			t.Fatalf("step %d: loss %v", i, last)
		}
		if i == 0 {
			first = last
		}
		if _, err := f.Step(); err != nil {
			t.Fatal(err)
		}
	}
	if !(last < 0.5*first) {
		t.Errorf("loss %v after 30 steps from %v: want it at least halved", last, first)
	}
	var held, float32s int64
	for _, p := range nn.Parameters(m) {
		st := opt.State(p.Path)
		n := p.Var.Value.Len()
		blocks := dynamic.Blocks(n, dynamic.BlockSize)
		if st == nil || !st.Quantized() || st.ExpAvg.DType() != dtype.I8 || !st.ExpAvgSq.SameShape(p.Var.Value) || st.ExpAvgAbsmax.Len() != blocks || st.ExpAvgSqAbsmax.Len() != blocks {
			t.Fatalf("%s: state %+v, want int8 codes of %v and %d absmax", p.Path, st, p.Var.Value.Shape(), blocks)
		}
		for _, x := range []*tensor.Tensor{st.ExpAvg, st.ExpAvgSq, st.ExpAvgAbsmax, st.ExpAvgSqAbsmax} {
			held += tensor.PoolBytes(x.DType(), x.Len())
		}
		float32s += 2 * tensor.PoolBytes(dtype.F32, n)
	}
	if r := float64(held) / float64(float32s); r > 0.27 {
		t.Errorf("8-bit moments take %d pool bytes, float32 ones %d: %.3f×, want at most 0.27×", held, float32s, r)
	}
	t.Logf("optimizer state: %d pool bytes, %d in float32 (%.3f×)", held, float32s, float64(held)/float64(float32s))
}

// TestAdamW8bitPlan: weft plan's optimizer-state bytes of the reference
// gpt under bf16-mixed+adamw8bit are at most 0.27 of bf16-mixed's float32
// moments, and a strategy that shards optimizer state is refused naming
// both.
func TestAdamW8bitPlan(t *testing.T) {
	plan := func(spec, strat string, devices int) (*fabric.Plan, error) {
		return fabric.MakePlan(models.NewGPT(nn.Meta(1), models.ReferenceGPT), policy(t, spec), precision.LossScalingAuto, strat, devices)
	}
	q, err := plan("bf16-mixed+adamw8bit", "single", 1)
	if err != nil {
		t.Fatal(err)
	}
	f, err := plan("bf16-mixed", "single", 1)
	if err != nil {
		t.Fatal(err)
	}
	r := float64(q.BytesPerRank.OptimizerState) / float64(f.BytesPerRank.OptimizerState)
	if r > 0.27 {
		t.Errorf("optimizer state %d B with adamw8bit, %d B without: %.3f×, want at most 0.27×", q.BytesPerRank.OptimizerState, f.BytesPerRank.OptimizerState, r)
	}
	t.Logf("plan optimizer state: %d B with adamw8bit, %d B without (%.3f×)", q.BytesPerRank.OptimizerState, f.BytesPerRank.OptimizerState, r)
	if _, err := plan("bf16-mixed+adamw8bit", "ddp", 2); err != nil {
		t.Errorf("ddp: %v", err)
	}
	for _, strat := range []string{"zero1", "zero2", "fsdp"} {
		_, err := plan("bf16-mixed+adamw8bit", strat, 2)
		if err == nil || !strings.Contains(err.Error(), "adamw8bit") || !strings.Contains(err.Error(), "strategy "+strat) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line naming adamw8bit and the strategy", strat, err)
		}
	}
}

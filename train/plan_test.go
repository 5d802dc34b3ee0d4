package train

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/tensor"
)

// planned is an Observer that keeps the plan a run reports.
type planned struct {
	quiet
	plan *fabric.Plan
}

func (p *planned) Plan(plan *fabric.Plan, _ int) { p.plan = plan }

// TestRunReportsPlansPlan: the plan a run reports is the one Plan builds
// from its config, field for field, with and without LoRA; with LoRA the
// gradients and AdamW moments are the adapters' alone.
func TestRunReportsPlansPlan(t *testing.T) {
	for _, lora := range [][]string{nil, {"blocks.*.qkv"}} {
		c := tinyConfig(t, "bf16-mixed")
		c.Steps, c.LoRA.Targets = 1, lora
		want, err := Plan(context.Background(), c, func(string) {})
		if err != nil {
			t.Fatal(err)
		}
		var obs planned
		if _, err := Run(context.Background(), c, false, &obs); err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(want)
		b, _ := json.Marshal(obs.plan)
		if string(a) != string(b) {
			t.Errorf("lora %v: Plan\n%s\nthe run's\n%s", lora, a, b)
		}
		if lora == nil {
			continue
		}
		var adapters int64
		for _, ad := range want.Adapters {
			adapters += ad.Bytes
		}
		if got := want.BytesPerRank; len(want.Adapters) != 2 || got.Grads != adapters || got.OptimizerState != 2*adapters || got.Frozen == 0 {
			t.Errorf("lora plan: %d adapters of %d bytes, bytes per rank %+v", len(want.Adapters), adapters, got)
		}
	}
}

// TestPlanOfAHugeBatchAllocatesNothing: the plan of a batch of a million
// sequences predicts its peak on shapes alone.
func TestPlanOfAHugeBatchAllocatesNothing(t *testing.T) {
	c := tinyConfig(t, "bf16-mixed")
	c.BatchSize = 1_000_000
	live := tensor.Memory().Live
	tensor.ResetPeak()
	p, err := Plan(context.Background(), c, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	if grew := tensor.Memory().Peak - live; grew > 1<<20 || p.Peak.Bytes < 1<<34 {
		t.Errorf("planning a peak of %d bytes took %d bytes of tensors", p.Peak.Bytes, grew)
	}
}

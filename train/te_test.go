package train

import (
	"context"
	"slices"
	"testing"
)

// TestTransformerEngineFallback: a gpt trained with
// transformer-engine(fallback=float32), given in a config's precision:,
// logs the losses of the composition it stands for spelled out, bit for
// bit, and not those of the bfloat16 fallback; with replace_layers=false
// it trains as the jmp policy alone.
func TestTransformerEngineFallback(t *testing.T) {
	run := func(precision string) []float64 {
		c := tinyConfig(t, "32-true")
		c.Steps, c.EvalEvery = 6, 3
		if _, err := ParseConfig([]byte("precision: {spec: \""+precision+"\"}\n"), &c); err != nil {
			t.Fatal(err)
		}
		if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
			t.Fatalf("%s: %v", precision, err)
		}
		return losses(t, c.Out)
	}
	fallback := run("transformer-engine(fallback=float32)")
	if len(fallback) != 6 {
		t.Fatalf("%d losses logged in 6 steps", len(fallback))
	}
	if explicit := run("params=bfloat16,compute=float32,output=float32+fp8"); !slices.Equal(fallback, explicit) {
		t.Errorf("losses %v with fallback=float32, %v spelled out", fallback, explicit)
	}
	if bf16 := run("transformer-engine"); slices.Equal(fallback, bf16) {
		t.Errorf("fallback=float32 trains as the bfloat16 fallback does: %v", bf16)
	}
	unreplaced := run("transformer-engine(fallback=float32,replace_layers=false)")
	if jmp := run("params=bfloat16,compute=float32,output=float32"); !slices.Equal(unreplaced, jmp) {
		t.Errorf("losses %v with replace_layers=false, %v under the policy alone", unreplaced, jmp)
	}
	if slices.Equal(unreplaced, fallback) {
		t.Errorf("replace_layers=false trains as FP8 GEMMs do: %v", fallback)
	}
}

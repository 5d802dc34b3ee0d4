package train

import (
	"context"
	"fmt"
	"testing"
)

// recipes are the precision recipes of today's training (issue #28's):
// each trains under every strategy, and on --tp 2
// (TestTensorParallelPrecisions).
var recipes = []string{
	"bf16-mixed+fp8-rowwise", "bf16-mixed+fp8-rowwise-gw-hp", "bf16-mixed+mxfp4", "bf16-mixed+nvfp4",
	"bf16-mixed+adamw8bit", "bf16-mixed+adamw4bit", "bf16-mixed+adamwfp8",
	"bf16-mixed+fp8-block", "bf16-true(stochastic_round=true)", "bf16-true(reduce_dtype=float32)",
}

// TestRecipesLearn: each recipe trains weft train's gpt on one device and
// on 2 ranks of ddp, zero2 and fsdp to a validation loss below its first.
func TestRecipesLearn(t *testing.T) {
	for _, spec := range recipes {
		for _, st := range []struct {
			name    string
			devices int
		}{{"single", 1}, {"ddp", 2}, {"zero2", 2}, {"fsdp", 2}} {
			t.Run(fmt.Sprintf("%s/%s", spec, st.name), func(t *testing.T) {
				t.Parallel()
				c := tinyConfig(t, spec)
				c.Steps, c.EvalEvery, c.SaveEvery, c.Strategy, c.Devices = 8, 8, 8, st.name, st.devices
				c.GPT.Width = 64 // whole 32-element MX blocks
				sum, err := Run(context.Background(), c, false, quiet{})
				if err != nil {
					t.Fatal(err)
				}
				if !(sum.LastValLoss < sum.FirstValLoss) {
					t.Errorf("validation loss %v -> %v", sum.FirstValLoss, sum.LastValLoss)
				}
			})
		}
	}
}

package train

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestFP8BlockTrains: fp8-block (Transformer Engine's Float8BlockScaling)
// trains the gpt to a falling validation loss on one device, under ddp,
// zero2 and fsdp over 2 ranks (width 128: whole 128×128 weight tiles) and
// on --tp 2 (width 256, whose shares hold whole tiles); on --tp 2 a gpt of
// width 64, whose shares would cut tiles across ranks, is refused in one
// line that names the Linear.
func TestFP8BlockTrains(t *testing.T) {
	for _, run := range []struct {
		strategy           string
		devices, tp, width int
	}{{"single", 1, 1, 128}, {"ddp", 2, 1, 128}, {"zero2", 2, 1, 128}, {"fsdp", 2, 1, 128}, {"single", 2, 2, 256}} {
		t.Run(fmt.Sprintf("%s/%d/tp%d", run.strategy, run.devices, run.tp), func(t *testing.T) {
			c := tinyConfig(t, "bf16-mixed+fp8-block")
			c.Steps, c.EvalEvery, c.SaveEvery = 8, 8, 8
			c.Strategy, c.Devices, c.TP, c.GPT.Width = run.strategy, run.devices, run.tp, run.width
			sum, err := Run(context.Background(), c, false, quiet{})
			if err != nil {
				t.Fatal(err)
			}
			if !(sum.LastValLoss < sum.FirstValLoss) {
				t.Errorf("validation loss %v -> %v", sum.FirstValLoss, sum.LastValLoss)
			}
		})
	}
	t.Run("tp2/cut tiles", func(t *testing.T) {
		c := tinyConfig(t, "bf16-mixed+fp8-block")
		c.Devices, c.TP, c.GPT.Width = 2, 2, 64
		_, err := Run(context.Background(), c, false, quiet{})
		if err == nil || !strings.Contains(err.Error(), "blocks.0.qkv") || !strings.Contains(err.Error(), "128-element fp8-block blocks") || strings.Contains(err.Error(), "\n") {
			t.Errorf("fp8-block over --tp 2 on width 64: error %v, want one line naming blocks.0.qkv and its 128-element blocks", err)
		}
	})
}

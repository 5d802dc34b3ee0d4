package train

import (
	"context"
	"strings"
	"testing"
)

// TestLlamaTrains: `weft train --model llama` learns the Go corpus in
// float32 and under bf16 autocast: validation loss falls well below its
// first value.
func TestLlamaTrains(t *testing.T) {
	for _, spec := range []string{"32-true", "bf16-mixed"} {
		t.Run(spec, func(t *testing.T) {
			c := tinyConfig(t, spec)
			c.Model = "llama"
			sum, err := Run(context.Background(), c, false, quiet{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("validation loss %.4f -> %.4f", sum.FirstValLoss, sum.LastValLoss)
			if !(sum.LastValLoss < 0.9*sum.FirstValLoss) {
				t.Errorf("llama validation loss %.4f -> %.4f: not 10%% lower", sum.FirstValLoss, sum.LastValLoss)
			}
		})
	}
}

// TestLlamaOddHeadWidth: rotary embeddings turn pairs, so an odd head
// width is refused before training.
func TestLlamaOddHeadWidth(t *testing.T) {
	c := tinyConfig(t, "32-true")
	c.Model, c.GPT.Width, c.GPT.Heads = "llama", 30, 2
	if _, err := Run(context.Background(), c, false, quiet{}); err == nil || !strings.Contains(err.Error(), "must be even") {
		t.Fatalf("odd head width: %v", err)
	}
}

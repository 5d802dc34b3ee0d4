package train

import (
	"context"
	"slices"
	"testing"
)

// TestEvalLeavesTrainingAlone: under delayed FP8 scaling (fp8, and
// transformer-engine's GEMMs) validation forwards record no amax, so a run
// that evaluates every 2 steps trains, bit for bit, as one that never
// does; the validation losses differ between the runs only in number.
func TestEvalLeavesTrainingAlone(t *testing.T) {
	for _, spec := range []string{"fp8", "transformer-engine"} {
		t.Run(spec, func(t *testing.T) {
			var runs [2][]float64
			for i, every := range []int{2, 1000} {
				c := tinyConfig(t, spec)
				c.Steps, c.EvalEvery, c.EvalBatches, c.SaveEvery = 6, every, 1, 1000
				if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
					t.Fatal(err)
				}
				runs[i] = losses(t, c.Out)
			}
			if len(runs[0]) != 6 || !slices.Equal(runs[0], runs[1]) {
				t.Errorf("training losses evaluating every 2 steps %v, never %v", runs[0], runs[1])
			}
		})
	}
}

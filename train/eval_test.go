package train

import (
	"context"
	"slices"
	"strings"
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

// TestEvalPrecisionThroughRun: a bf16-mixed run with eval precision
// 32-true trains the losses of one without, bit for bit, and logs as its
// last val loss a 32-true evaluation of its last weights (those of a
// 32-true run from them whose first step moves no weight); a spec the
// fabric refuses stops the run with one line.
func TestEvalPrecisionThroughRun(t *testing.T) {
	mixed := func(eval string) Config {
		c := tinyConfig(t, "bf16-mixed")
		c.Steps, c.EvalEvery, c.SaveEvery, c.EvalPrecision = 3, 100, 3, eval
		return c
	}
	trained := mixed("32-true")
	got, plain := runMetrics(t, trained), runMetrics(t, mixed(""))
	for s := range got {
		if got[s].Loss != plain[s].Loss {
			t.Errorf("step %d: loss %v, without eval precision %v", s, got[s].Loss, plain[s].Loss)
		}
	}
	ref := tinyConfig(t, "32-true")
	ref.InitFrom, ref.Steps, ref.LR, ref.WeightDecay = trained.Out, 1, 1e-300, 0 // an update of 1e-300 rounds away
	want := runMetrics(t, ref)[0].ValLoss
	last, bf16 := got[len(got)-1].ValLoss, plain[len(plain)-1].ValLoss
	if last == nil || want == nil || *last != *want || *last == *bf16 {
		t.Errorf("last val loss %v; a 32-true evaluation of the weights %v, bf16-mixed's %v", deref(last), deref(want), deref(bf16))
	}

	c := mixed("bf16-true")
	_, err := Run(context.Background(), c, false, quiet{})
	if want := "eval precision bf16-true computes over weights stored in bfloat16"; err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Errorf("eval precision bf16-true of a bf16-mixed run: %v; want one line with %q", err, want)
	}
	c = mixed("bf16-mxied")
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), `eval precision: precision "bf16-mxied" is not known; did you mean bf16-mixed?`) {
		t.Errorf("a misspelt eval precision: %v", err)
	}
}

func deref(f *Float) any {
	if f == nil {
		return nil
	}
	return float64(*f)
}

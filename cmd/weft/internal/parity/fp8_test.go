package parity

import (
	"math"
	"testing"
)

// TestFP8Training trains the reference gpt with FP8 GEMMs in several
// compositions and checks that each ends within 3% of PyTorch's final loss
// in bf16-mixed or, where the reference has no such run, in 32-true. No
// PyTorch run used FP8 here, so the final loss is what is compared.
func TestFP8Training(t *testing.T) {
	ref, traj := loadReference(t)
	gpt, ok := traj.Models["gpt"]
	if !ok {
		t.Skip("trajectories.json has no gpt runs")
	}
	var base string
	var run Run
	for _, base = range []string{"bf16-mixed", "32-true"} {
		if run, ok = gpt.Runs[base]; ok {
			break
		}
	}
	if !ok || len(run.Losses) == 0 || run.Losses[len(run.Losses)-1] == nil {
		t.Skip("trajectories.json has no finite gpt bf16-mixed or 32-true run to compare with")
	}
	want := *run.Losses[len(run.Losses)-1]
	for _, spec := range []string{"transformer-engine", "bf16-mixed+fp8", "bf16-fp8", "fp8", "fp8-current", "fp8-mx", "bf16-mixed+fp8-block", "bf16-mixed+fp8-rowwise", "bf16-mixed+fp8-rowwise-gw-hp", "bf16-mixed+mxfp4", "bf16-mixed+nvfp4"} {
		t.Run(spec, func(t *testing.T) {
			t.Parallel()
			p := mustSpec(t, spec)
			res, err := Train(ref, "gpt", len(run.Losses), p, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := float64(res.Losses[len(res.Losses)-1])
			rel := (got - want) / want
			t.Logf("gpt %s: final loss %.6f, PyTorch %s %.6f (%+.2f%%)", p, got, base, want, 100*rel)
			if !(math.Abs(rel) <= 0.03) {
				t.Errorf("final loss %.6f is %+.2f%% from PyTorch's %s %.6f, want within 3%%", got, 100*rel, base, want)
			}
		})
	}
}

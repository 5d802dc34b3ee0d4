package bench

import (
	"testing"

	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/tensor"
)

// TestStepAllocations checks that a steady training step of the small
// reference models allocates nothing: activations, gradients, tensor
// headers and tape nodes all come back from the previous step.
func TestStepAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	for _, model := range []string{"mlp", "cnn", "gpt"} {
		for _, spec := range []string{"32-true", "bf16-mixed"} {
			step, err := newStep(model, mustParse(t, spec))
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if err := step(); err != nil {
					t.Fatal(err)
				}
			}
			if n := testing.AllocsPerRun(10, func() {
				if err := step(); err != nil {
					t.Fatal(err)
				}
			}); n != 0 {
				t.Errorf("%s %s: %v allocations per step, want 0", model, spec, n)
			}
		}
	}
}

func mustParse(tb testing.TB, spec string) precision.Plugin {
	tb.Helper()
	p, err := precision.Parse(spec, precision.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// TestStepMemorySteady checks that the tensor pool reaches its steady
// state in the first step: from step 2 on, Live between steps, the peak
// within them and the bytes the pool holds no longer change, so nothing
// a step allocates is left behind.
func TestStepMemorySteady(t *testing.T) {
	for _, model := range []string{"mlp", "cnn", "gpt"} {
		for _, spec := range []string{"32-true", "bf16-mixed"} {
			step, err := newStep(model, mustParse(t, spec))
			if err != nil {
				t.Fatal(err)
			}
			tensor.ResetPeak()
			before := tensor.Memory()
			var after [5]tensor.MemStats
			for i := range after {
				if err := step(); err != nil {
					t.Fatal(err)
				}
				after[i] = tensor.Memory()
			}
			if after[1] != after[4] {
				t.Errorf("%s %s: pool after step 2 %+v, after step 5 %+v", model, spec, after[1], after[4])
			}
			t.Logf("%s %s: peak %d bytes, %d live between steps, %d reserved (above what was before step 1)",
				model, spec, after[4].Peak-before.Live, after[4].Live-before.Live, after[4].Reserved-before.Reserved)
		}
	}
}

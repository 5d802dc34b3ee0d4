package bench

import (
	"testing"

	"github.com/weftml/weft/precision"
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

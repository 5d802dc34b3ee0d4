package precisiontest_test

import (
	"fmt"
	"log"
	"math"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/precisiontest"
	"github.com/weftml/weft/tensor"
)

// A plugin's whole conformance test is one call of Run in a test
// function, with a factory that returns a fresh plugin each time; here
// bf16-mixed as Parse builds it. (Run needs the *testing.T of a test, so
// this example shows the call and is not run; precision's
// TestConformance makes it for every built-in spec.)
func ExampleRun() {
	_ = func(t *testing.T) { // func TestConformance(t *testing.T)
		precisiontest.Run(t, func() precision.Plugin {
			p, err := precision.Parse("bf16-mixed", precision.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return p
		})
	}
}

// A CountingOptimizer shows whether a loss scaler stepped or skipped: a
// gradient holding inf makes the GradScaler skip the step and halve its
// scale; a finite one steps.
func ExampleNewCountingOptimizer() {
	w := autograd.Param(tensor.FromFloat32([]float32{1, 2}, 2))
	opt := precisiontest.NewCountingOptimizer(nn.NamedParam{Path: "w", Var: w})
	scaler := precision.NewGradScaler()
	for _, g := range [][]float32{{3, float32(math.Inf(1))}, {3, 4}} {
		w.Grad = tensor.FromFloat32(g, 2)
		skipped, err := scaler.Step(opt) // unscales, checks for inf/NaN, steps or skips
		if err != nil {
			log.Fatal(err)
		}
		scaler.Update()
		fmt.Printf("skipped %v, steps %d, scale %g\n", skipped, opt.Steps, scaler.Scale())
	}
	// Output:
	// skipped true, steps 0, scale 32768
	// skipped false, steps 1, scale 32768
}

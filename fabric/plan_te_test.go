package fabric_test

import (
	"testing"

	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
)

// TestPlanTransformerEngineArgs: the plan of the reference gpt shows
// transformer-engine's fallback as every op class's compute dtype, over
// bfloat16 weights, but E4M3/E5M2 for a converted Linear's GEMMs, and
// replace_layers=false as no Linear converted.
func TestPlanTransformerEngineArgs(t *testing.T) {
	for _, c := range []struct {
		spec, compute string
		fp8           bool
	}{
		{"transformer-engine", "bfloat16", true},
		{"transformer-engine(fallback=float32)", "float32", true},
		{"transformer-engine(fallback=float32,replace_layers=false)", "float32", false},
		{"transformer-engine(replace_layers=false)", "bfloat16", false},
	} {
		p, err := fabric.MakePlan(models.NewGPT(nn.Meta(1), models.ReferenceGPT), policy(t, c.spec), precision.LossScalingAuto, "single", 1)
		if err != nil {
			t.Fatal(err)
		}
		linears := 0
		for _, mp := range p.Modules {
			for _, class := range []string{"gemm", "norm", "elementwise"} {
				want := c.compute
				if class == "gemm" && c.fp8 && mp.Converted != "" { // TE's hybrid format
					want = "float8_e4m3fn/float8_e5m2"
				}
				if mp.Compute[class] != want {
					t.Errorf("%s: %s computes %s in %s, want %s", c.spec, mp.Path, class, mp.Compute[class], want)
				}
			}
			if mp.Storage != "bfloat16" {
				t.Errorf("%s: %s stored in %s, want bfloat16", c.spec, mp.Path, mp.Storage)
			}
			if mp.Kind == "Linear" {
				linears++
				if converted := mp.Converted == "fp8 GEMMs"; converted != c.fp8 {
					t.Errorf("%s: %s converted %q, want fp8 GEMMs: %v", c.spec, mp.Path, mp.Converted, c.fp8)
				}
			}
		}
		if linears == 0 {
			t.Fatalf("%s: the plan has no Linear", c.spec)
		}
	}
}

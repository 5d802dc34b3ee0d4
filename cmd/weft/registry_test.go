package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/precision"
)

// f64Norm runs layer_norm in float64, as a user's plugin might.
type f64Norm struct{}

func (f64Norm) Name() string { return "test-f64-norm" }
func (f64Norm) CastInput(op autograd.Op, in dtype.DType) dtype.DType {
	if op == autograd.OpLayerNorm {
		return dtype.F64
	}
	return in
}

// TestPlanRegistered: a name registered in the binary is a spec for the
// CLI. A registration lasts as long as the process, and the catalogue
// lists weft's own names, so the checks run in a child process.
func TestPlanRegistered(t *testing.T) {
	if os.Getenv("WEFT_TEST_REGISTERED") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPlanRegistered$")
		cmd.Env = append(os.Environ(), "WEFT_TEST_REGISTERED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		return
	}
	if err := precision.Register("test-f64-norm", func() precision.Plugin { return f64Norm{} }); err != nil {
		t.Fatal(err)
	}
	out, code := run("plan", "--precision", "bf16-true+test-f64-norm", "--json")
	if code != 0 || !strings.Contains(out, `"precision":"bf16-true+test-f64-norm"`) || !strings.Contains(out, `"norm":"float64"`) {
		t.Errorf("exit %d; want the plan of bf16-true+test-f64-norm with float64 norms:\n%s", code, out)
	}
	out, code = run("plan", "--precision", "bf16-mixed", "--precision-for", "kind:LayerNorm=test-f64-norm")
	// module, kind, plugins, converted, storage, gemm, norm
	if code != 0 || !regexp.MustCompile(`blocks\.0\.ln1 +LayerNorm +test-f64-norm +- +float32 +float32 +float64 `).MatchString(out) {
		t.Errorf("exit %d; want blocks.0.ln1 under test-f64-norm, norm in float64:\n%s", code, out)
	}
	out, code = run("plan", "--precision", "bf16-mixed+test-f64-norm")
	if code != 2 || !strings.Contains(out, "role compute (autocast) claimed by bf16-mixed and test-f64-norm") {
		t.Errorf("exit %d; want the compute conflict of two autocasts:\n%s", code, out)
	}
	if out, _ := run("plan", "--precision", "fp9"); !strings.Contains(out, "test-f64-norm") {
		t.Errorf("the unknown-spec error does not list the registered name:\n%s", out)
	}
}

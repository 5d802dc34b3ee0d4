package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/precision"
)

// f64Master keeps master weights in float64, as a user's plugin might; it
// claims storage alone, so it composes with bf16-mixed by "+".
type f64Master struct{}

func (f64Master) Name() string              { return "test-f64-master" }
func (f64Master) StorageDType() dtype.DType { return dtype.F64 }

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
	if err := precision.Register("test-f64-master", func() precision.Plugin { return f64Master{} }); err != nil {
		t.Fatal(err)
	}
	// module, kind, plugins, converted, storage, gemm: bf16-mixed leaves
	// float64 alone, as CUDA autocast does.
	out, code := run("plan", "--precision", "bf16-mixed+test-f64-master")
	if code != 0 || !strings.Contains(out, "precision bf16-mixed+test-f64-master;") ||
		!regexp.MustCompile(`blocks\.0\.qkv +Linear +bf16-mixed\+test-f64-master +- +float64 +float64 `).MatchString(out) {
		t.Errorf("exit %d; want blocks.0.qkv stored and computing in float64:\n%s", code, out)
	}
	out, code = run("plan", "--precision", "bf16-mixed", "--precision-for", "kind:LayerNorm=test-f64-master")
	if code != 0 || !regexp.MustCompile(`blocks\.0\.ln1 +LayerNorm +test-f64-master +- +float64 `).MatchString(out) ||
		!regexp.MustCompile(`blocks\.0\.qkv +Linear +bf16-mixed +- +float32 `).MatchString(out) {
		t.Errorf("exit %d; want only the LayerNorms under test-f64-master:\n%s", code, out)
	}
	out, code = run("plan", "--precision", "bf16-true+test-f64-master")
	if code != 2 || !strings.Contains(out, "role storage claimed by bf16-true (bfloat16) and test-f64-master (float64)") {
		t.Errorf("exit %d; want the storage conflict:\n%s", code, out)
	}
	if out, _ := run("plan", "--precision", "fp9"); !strings.Contains(out, "test-f64-master") {
		t.Errorf("the unknown-spec error does not list the registered name:\n%s", out)
	}
}

package train

import (
	"context"
	"encoding/binary"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// python is Debian's interpreter, the one python3-torch installs into.
const python = "/usr/bin/python3"

// TestLoRAExportMatchesPyTorch: a QLoRA run (nf4-dq weights, adapters on
// some Linears) exported merged (HF layout) and as PEFT adapters gives,
// in PyTorch (testdata/hf: the plain-torch forward, and the adapters added
// to the base weights as PEFT merges them, no peft library), the logits
// weft computes with its own nf4 and LoRA arithmetic in float32, within
// 1e-5 normwise; the base alone does not, so the adapters count. For a
// gpt (GPT-2's Conv1D layout, fan_in_fan_out) and a llama.
func TestLoRAExportMatchesPyTorch(t *testing.T) {
	if err := exec.Command(python, "-c", "import torch").Run(); err != nil {
		t.Skipf("PyTorch is not importable by %s (%v): apt-get install python3-torch to run the oracle", python, err)
	}
	for _, c := range []struct {
		model   string
		targets []string
	}{{"gpt", []string{"blocks.*.qkv", "blocks.*.fc"}}, {"llama", []string{"blocks.*.q", "blocks.*.v", "blocks.*.down"}}} {
		t.Run(c.model, func(t *testing.T) {
			run := tinyConfig(t, "bf16-true+nf4-dq")
			run.Model, run.Steps, run.LR = c.model, 8, 0.01
			run.LoRA = LoRA{Targets: c.targets, Rank: 4, Alpha: 8}
			if _, err := Run(context.Background(), run, false, quiet{}); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			merged, peft := filepath.Join(dir, "merged"), filepath.Join(dir, "peft")
			if err := Export(run.Out, "", merged); err != nil {
				t.Fatal(err)
			}
			if err := Export(run.Out, "peft", peft); err != nil {
				t.Fatal(err)
			}
			b := data.Batch{Shape: []int{2, run.GPT.Context}}
			for i := range 2 * run.GPT.Context {
				b.Tokens = append(b.Tokens, (7*i+3)%90)
			}
			want := weftLogits(t, run.Out, b)
			tokens := writeTokens(t, dir, b)
			oracle := filepath.Join("..", "testdata", "hf")
			at := func(name string) string { return filepath.Join(dir, name+".safetensors") }
			pytorch(t, filepath.Join(oracle, "oracle.py"), "run", merged, tokens, at("merged"), ",", filepath.Join(peft, "base"), tokens, at("base"))
			pytorch(t, filepath.Join(oracle, "lora_oracle.py"), peft, tokens, at("peft"))
			for _, name := range []string{"merged", "peft"} {
				e := normwise(logitsOf(t, at(name)), want)
				t.Logf("PyTorch on the %s export vs weft: %.3g", name, e)
				if e > 1e-5 {
					t.Errorf("PyTorch's logits of the %s export differ from weft's by %.3g normwise, more than 1e-5", name, e)
				}
			}
			if e := normwise(logitsOf(t, at("base")), want); e < 1e-3 {
				t.Logf("the base alone vs weft: %.3g", e)
				t.Errorf("the base model without its adapters is within %.3g of weft's logits: the adapters changed nothing", e)
			}
		})
	}
}

// weftLogits are the logits of run's latest checkpoint on b, computed by
// the run's model as weft rebuilds it (nf4 weights, LoRA adapters beside
// them) with every parameter in float32.
func weftLogits(t *testing.T, run string, b data.Batch) []float64 {
	t.Helper()
	_, lm, _, err := restore(run)
	if err != nil {
		t.Fatal(err)
	}
	nn.Walk(lm, func(_ string, m nn.Module) { nn.CastOwn(m, dtype.F32) })
	var tp autograd.Tape
	tp.NoGrad = true
	logits, err := lm.Forward(&tp, b)
	if err != nil {
		t.Fatal(err)
	}
	if logits.Value.DType() != dtype.F32 {
		t.Fatalf("weft's logits are %s, want float32", logits.Value.DType())
	}
	return logits.Value.Float64s()
}

// pytorch runs a script of testdata/hf with args.
func pytorch(t *testing.T, script string, args ...string) {
	t.Helper()
	out, err := exec.Command(python, append([]string{script}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(script), strings.Join(args, " "), err, out)
	}
}

// writeTokens writes b's tokens as the oracles read them (int64 [B, T]).
func writeTokens(t *testing.T, dir string, b data.Batch) string {
	t.Helper()
	raw := make([]byte, 8*len(b.Tokens))
	for i, id := range b.Tokens {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(id))
	}
	path := filepath.Join(dir, "tokens.safetensors")
	if err := checkpoint.WriteSafetensors(path, []checkpoint.Tensor{{Name: "tokens", DType: dtype.I64, Shape: b.Shape, Data: raw}}, nil); err != nil {
		t.Fatal(err)
	}
	return path
}

// logitsOf reads the logits an oracle wrote.
func logitsOf(t *testing.T, path string) []float64 {
	t.Helper()
	f, err := checkpoint.ReadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := f.Tensor("logits")
	if !ok {
		t.Fatalf("%s has no logits", path)
	}
	l, err := tensor.FromBytes(st.DType, st.Data, st.Shape...)
	if err != nil {
		t.Fatal(err)
	}
	return l.Float64s()
}

// normwise is max|a−b| / max|b|.
func normwise(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d, m float64
	for i := range b {
		d, m = max(d, math.Abs(a[i]-b[i])), max(m, math.Abs(b[i]))
	}
	return d / m
}

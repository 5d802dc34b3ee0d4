package train

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/torchoracle"
	"github.com/weftml/weft/nn"
)

// TestLoRAExportMatchesPyTorch: a QLoRA run (nf4-dq weights, adapters on
// some Linears) exported merged (HF layout) and as PEFT adapters gives,
// in PyTorch (testdata/hf: the plain-torch forward, and the adapters added
// to the base weights as PEFT merges them, no peft library), the logits
// weft computes with its own nf4 and LoRA arithmetic in float32, within
// 1e-5 normwise; the base alone does not, so the adapters count. For a
// gpt (GPT-2's Conv1D layout, fan_in_fan_out) and a llama.
func TestLoRAExportMatchesPyTorch(t *testing.T) {
	torchoracle.Need(t)
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
			tokens := torchoracle.WriteTokens(t, dir, b)
			oracle := filepath.Join("..", "testdata", "hf")
			at := func(name string) string { return filepath.Join(dir, name+".safetensors") }
			logits := func(path string) []float64 { _, l := torchoracle.Read(t, path); return l }
			torchoracle.Run(t, filepath.Join(oracle, "lora_oracle.py"), "peft", peft, tokens, at("peft"),
				",", "run", merged, tokens, at("merged"), ",", "run", filepath.Join(peft, "base"), tokens, at("base"))
			for _, name := range []string{"merged", "peft"} {
				e := torchoracle.Normwise(logits(at(name)), want)
				t.Logf("PyTorch on the %s export vs weft: %.3g", name, e)
				if e > torchoracle.Tol {
					t.Errorf("PyTorch's logits of the %s export differ from weft's by %.3g normwise, more than %g", name, e, torchoracle.Tol)
				}
			}
			e := torchoracle.Normwise(logits(at("base")), want)
			t.Logf("PyTorch on the base alone vs weft: %.3g", e)
			if e < 1e-3 {
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

// TestRestoreIsTheTrainedModel: the model export and sample rebuild from a
// QLoRA run's latest checkpoint (frozen weights drawn again from the seed,
// or read again from --init-from, and quantized; adapters and the rest from
// the checkpoint) is the one the run trained: its validation loss is the
// run's last, bit for bit.
func TestRestoreIsTheTrainedModel(t *testing.T) {
	base := tinyConfig(t, "32-true")
	base.Steps = 4
	if _, err := Run(context.Background(), base, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	for _, init := range []string{"", base.Out} {
		c := tinyConfig(t, "bf16-true+nf4-dq")
		c.Steps, c.InitFrom = 6, init
		c.LoRA = LoRA{Targets: []string{"blocks.*.qkv", "blocks.*.out"}, Rank: 4, Alpha: 8}
		sum, err := Run(context.Background(), c, false, quiet{})
		if err != nil {
			t.Fatal(err)
		}
		m, lm, f, err := restore(c.Out)
		if err != nil {
			t.Fatal(err)
		}
		task, err := newTask(m.Config)
		if err != nil {
			t.Fatal(err)
		}
		var total float64
		for i := range c.EvalBatches {
			l, err := f.EvalLoss(context.Background(), lm, task.val(i))
			if err != nil {
				t.Fatal(err)
			}
			total += l
		}
		if got := total / float64(c.EvalBatches); got != sum.LastValLoss {
			t.Errorf("init from %q: the restored model's validation loss is %v, the run's last %v", init, got, sum.LastValLoss)
		}
	}
}

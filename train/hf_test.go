package train

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/models/hf"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
)

// importedValLoss is the validation loss of c's model started from
// c.InitFrom, as a run of c would build, load and evaluate it.
func importedValLoss(t *testing.T, c Config) (float64, models.Model) {
	t.Helper()
	tk, err := newTask(c)
	if err != nil {
		t.Fatal(err)
	}
	m := tk.newModel()
	if err := loadWeights(nil, c.InitFrom, m); err != nil {
		t.Fatal(err)
	}
	pol, scaling, err := c.policy(func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	opt, err := optim.NewAdamW(nn.Parameters(m), optim.AdamWConfig{LR: c.LR})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fabric.New(fabric.Config{Policy: pol, LossScaling: scaling})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Setup(m, opt); err != nil {
		t.Fatal(err)
	}
	r := &rankRun{c: c, t: tk, model: m, f: f}
	v, err := r.evaluate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return v, m
}

// TestExportKeepsValidationLoss: a gpt trained by Run, exported in the
// GPT-2 layout and taken back as --init-from takes a folder (the model
// built from its config.json), has the exporting run's last validation
// loss to 1e-6; so does a llama in the Llama layout.
func TestExportKeepsValidationLoss(t *testing.T) {
	for _, c := range []struct{ model, format string }{{"gpt", "gpt2"}, {"llama", "llama"}} {
		t.Run(c.model, func(t *testing.T) {
			base := tinyConfig(t, "32-true")
			base.Model = c.model
			sum, err := Run(context.Background(), base, false, quiet{})
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), c.format)
			if err := Export(base.Out, c.format, out); err != nil {
				t.Fatal(err)
			}
			cfg, err := hf.ReadConfig(out)
			if err != nil || cfg.ModelType != c.format {
				t.Fatalf("exported config %+v, %v", cfg, err)
			}
			imported := base
			imported.InitFrom, imported.Out = out, t.TempDir()
			imported.Model = "gpt" // the folder decides the architecture
			got, m := importedValLoss(t, imported)
			t.Logf("validation loss: exporting run %.9g, import %.9g", sum.LastValLoss, got)
			if d := math.Abs(got - sum.LastValLoss); d > 1e-6 {
				t.Errorf("imported %T has validation loss %.9g, the exporting run %.9g (|Δ| %.3g > 1e-6)", m, got, sum.LastValLoss, d)
			}
		})
	}
}

// TestInitFromHFChecks: a folder whose model cannot take the Go corpus's
// tokens, or whose run's context exceeds its positions, is refused before
// training.
func TestInitFromHFChecks(t *testing.T) {
	dir := t.TempDir()
	small := models.NewGPT(nn.NewInit(1), models.GPTConfig{Vocab: 20, Context: 8, Width: 16, Heads: 2, Layers: 1})
	if err := hf.Save(dir, "gpt2", small); err != nil {
		t.Fatal(err)
	}
	c := tinyConfig(t, "32-true")
	c.InitFrom = dir
	_, err := Run(context.Background(), c, false, quiet{})
	if err == nil || !strings.Contains(err.Error(), "its model takes 20 token ids and 8 positions") {
		t.Fatalf("Run from a too small model: %v", err)
	}
}

// TestTiedHeadTrains: a GPT-2 folder with a tied head (HF's default)
// fine-tunes under single, ddp, zero2 and fsdp, which agree on the losses.
func TestTiedHeadTrains(t *testing.T) {
	dir := t.TempDir()
	m := models.NewGPT(nn.NewInit(1), models.GPTConfig{Vocab: 100, Context: 16, Width: 32, Heads: 2, Layers: 1, TiedHead: true, TanhGELU: true})
	if err := hf.Save(dir, "gpt2", m); err != nil {
		t.Fatal(err)
	}
	var first *Summary
	for _, s := range []struct {
		strategy string
		devices  int
	}{{"single", 1}, {"ddp", 2}, {"zero2", 2}, {"fsdp", 2}} {
		c := tinyConfig(t, "32-true")
		c.InitFrom, c.Strategy, c.Devices = dir, s.strategy, s.devices
		sum, err := Run(context.Background(), c, false, quiet{})
		if err != nil {
			t.Fatalf("%s: %v", s.strategy, err)
		}
		if first == nil {
			first = sum
			if !(sum.LastValLoss < sum.FirstValLoss) {
				t.Errorf("validation loss %.4f -> %.4f: no better", sum.FirstValLoss, sum.LastValLoss)
			}
		} else if d := math.Abs(sum.LastValLoss - first.LastValLoss); d > 1e-5*first.LastValLoss {
			t.Errorf("%s: last validation loss %.7g, single's %.7g", s.strategy, sum.LastValLoss, first.LastValLoss)
		}
	}
}

// TestQLoRAFromExport: the QLoRA fine-tune of TestQLoRA, started from a
// trained run's HF export instead of the run: with the weights in nf4-dq
// and only the adapters training, the net/ part's validation loss falls,
// for a gpt in the GPT-2 layout and a llama in the Llama layout.
func TestQLoRAFromExport(t *testing.T) {
	for _, c := range []struct {
		model, format string
		targets       []string
	}{{"gpt", "gpt2", []string{"blocks.*.qkv", "blocks.*.fc"}}, {"llama", "llama", []string{"blocks.*.q", "blocks.*.v", "blocks.*.gate"}}} {
		t.Run(c.model, func(t *testing.T) {
			base := tinyConfig(t, "32-true")
			base.Model, base.Steps = c.model, 30
			if _, err := Run(context.Background(), base, false, quiet{}); err != nil {
				t.Fatal(err)
			}
			folder := filepath.Join(t.TempDir(), c.format)
			if err := Export(base.Out, c.format, folder); err != nil {
				t.Fatal(err)
			}
			ft := tinyConfig(t, "bf16-true+nf4-dq")
			ft.InitFrom, ft.CorpusPart, ft.Steps, ft.EvalEvery = folder, "net/", 40, 20
			ft.LoRA = LoRA{Targets: c.targets, Rank: 8, Alpha: 16}
			sum, err := Run(context.Background(), ft, false, quiet{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("net/ validation loss %.4f -> %.4f", sum.FirstValLoss, sum.LastValLoss)
			if !(sum.LastValLoss < sum.FirstValLoss) || sum.QuantizedBytes == 0 {
				t.Errorf("net/ validation loss %.4f -> %.4f with %d quantized bytes", sum.FirstValLoss, sum.LastValLoss, sum.QuantizedBytes)
			}
		})
	}
}

// TestSampleLanguageModels: weft sample continues a prompt with a llama
// run, and with a run fine-tuned from an HF folder whose model (built from
// its config.json, not the run's sizes) has a larger vocabulary than the
// corpus: only the corpus's ids are drawn. The run's manifest records that
// model, so sample and export need the folder no more.
func TestSampleLanguageModels(t *testing.T) {
	folder := t.TempDir()
	wide := models.NewGPT(nn.NewInit(1), models.GPTConfig{Vocab: 300, Context: 32, Width: 16, Heads: 2, Layers: 1, TiedHead: true, TanhGELU: true})
	if err := hf.Save(folder, "gpt2", wide); err != nil {
		t.Fatal(err)
	}
	llama := tinyConfig(t, "32-true")
	llama.Model, llama.Steps = "llama", 4
	fromHF := tinyConfig(t, "bf16-mixed")
	fromHF.InitFrom, fromHF.Steps = folder, 4
	for _, c := range []Config{llama, fromHF} {
		if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
			t.Fatal(err)
		}
		if c.InitFrom != "" {
			if err := os.RemoveAll(c.InitFrom); err != nil {
				t.Fatal(err)
			}
			again := filepath.Join(t.TempDir(), "again")
			if err := Export(c.Out, "gpt2", again); err != nil {
				t.Fatal(err)
			}
			if cfg, err := hf.ReadConfig(again); err != nil || cfg.VocabSize != 300 || cfg.TieWordEmbeddings == nil || !*cfg.TieWordEmbeddings {
				t.Errorf("export of the fine-tuned run: %+v, %v; want the folder's model (300 ids, tied)", cfg, err)
			}
		}
		const prompt = "func main() {"
		text, err := Sample(c.Out, prompt, 20, 0.8, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(text, prompt) || len(text) != len(prompt)+20 {
			t.Errorf("%s run sampled %q: want the prompt and 20 characters", c.Model, text)
		}
	}
}

// TestInitFromOtherVocabulary: a run trained on text with the byte
// tokenizer does not start a run on the Go corpus: the error names both
// vocabularies instead of a shape.
func TestInitFromOtherVocabulary(t *testing.T) {
	text := tinyConfig(t, "32-true")
	text.Steps, text.Data = 2, writeText(t, 2, strings.Fields("one two three four five six seven eight nine ten and then"))
	if _, err := Run(context.Background(), text, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	c := tinyConfig(t, "32-true")
	c.InitFrom = text.Out
	_, err := Run(context.Background(), c, false, quiet{})
	if err == nil || !strings.Contains(err.Error(), "a vocabulary of 256 token ids; this run's has 98") {
		t.Fatalf("error %v, want one naming both vocabularies", err)
	}
}

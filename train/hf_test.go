package train

import (
	"context"
	"math"
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
	if err := loadWeights(c.InitFrom, m); err != nil {
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
	f := fabric.NewPolicy(pol, scaling)
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

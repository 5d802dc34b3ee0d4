package train

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/nn"
)

// warnings is an Observer that keeps the warnings of a run.
type warnings struct {
	quiet
	lines []string
}

func (w *warnings) Warn(msg string) { w.lines = append(w.lines, msg) }

// TestResumeConverts: a run of 32-true under zero1 on 2 ranks resumed as
// bf16-true under zero1 on 4 ranks casts every parameter and moment to
// bfloat16 and reshards the optimizer state, one line each, and trains on
// from the checkpoint's weights (its first loss is the checkpoint's
// neighbourhood, not a fresh model's); resumed as 16-mixed on one device
// its loss scaler starts fresh and says so. A changed model is an error.
func TestResumeConverts(t *testing.T) {
	c := tinyConfig(t, "32-true")
	c.Strategy, c.Devices, c.Steps, c.SaveEvery = "zero1", 2, 10, 10
	if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	trained := losses(t, c.Out)
	fresh := trained[0]
	params := len(nn.Parameters(mustTask(t, c).metaModel()))
	for _, to := range []struct {
		precision, strategy string
		devices             int
		changed             string
		want                []string
	}{
		{"bf16-true", "zero1", 4, "precision 32-true -> bf16-true, strategy zero1 on 2 devices -> zero1 on 4 devices", []string{
			fmt.Sprintf("resume: cast %d parameters float32→bfloat16", params),
			fmt.Sprintf("resume: cast %d optimizer moments float32→bfloat16", 2*params),
			"resume: optimizer state resharded from 2 to 4 ranks",
		}},
		{"16-mixed", "single", 1, "precision 32-true -> 16-mixed, strategy zero1 on 2 devices -> single on 1 device", []string{
			"resume: precision state 16-mixed, loss-scaler starts fresh (the checkpoint has none)",
			"resume: optimizer state joined from 2 ranks' shards",
		}},
	} {
		r := c
		r.Out = t.TempDir()
		if err := os.CopyFS(r.Out, os.DirFS(c.Out)); err != nil {
			t.Fatal(err)
		}
		r.Precision, r.Strategy, r.Devices, r.Steps = to.precision, to.strategy, to.devices, 12
		obs := &warnings{}
		if _, err := Run(context.Background(), r, true, obs); err != nil {
			t.Fatalf("resume as %s %s×%d: %v", to.precision, to.strategy, to.devices, err)
		}
		ckpt := filepath.Join(r.Out, "checkpoints", "step-000010")
		want := append([]string{"resumed from step 10 (" + ckpt + ")", "resume: changed since checkpoint " + ckpt + ": " + to.changed}, to.want...)
		if !slices.Equal(obs.lines, want) {
			t.Errorf("resume as %s %s×%d said\n%s\nwant\n%s", to.precision, to.strategy, to.devices, strings.Join(obs.lines, "\n"), strings.Join(want, "\n"))
		}
		got := losses(t, r.Out)
		next, last := got[10], trained[9]
		if math.IsNaN(next) || math.Abs(next-last) > 0.25*(fresh-last) {
			t.Errorf("resume as %s: step 10 loss %v, the checkpoint's last %v, a fresh model's %v: the weights were not carried over", to.precision, next, last, fresh)
		}
	}
	r := c
	r.GPT.Width, r.GPT.Heads, r.Steps = 64, 4, 12
	if _, err := Run(context.Background(), r, true, quiet{}); err == nil || !strings.Contains(err.Error(), "trained another model or data than this run: model gpt (layers 1, width 32, heads 2, context 16) -> gpt (layers 1, width 64, heads 4, context 16);") {
		t.Fatalf("resuming a run of another gpt size: %v", err)
	}
}

func mustTask(t *testing.T, c Config) *task {
	t.Helper()
	tk, err := newTask(c)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestInitFromRawWeights: --init-from a plain safetensors file of weights
// (fabric.Fabric.LoadRaw) starts a run where the run folder they came from
// does, to the bit; a file with a tensor the model lacks is refused by
// name.
func TestInitFromRawWeights(t *testing.T) {
	base := tinyConfig(t, "32-true")
	base.Steps, base.SaveEvery = 4, 4
	if _, err := Run(context.Background(), base, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	_, dir, err := ReadManifest(filepath.Join(base.Out, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	ck, err := fabric.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	var weights []checkpoint.Tensor
	for _, name := range ck.Names() {
		if path, ok := strings.CutPrefix(name, "model."); ok {
			v, err := ck.Tensor(name)
			if err != nil {
				t.Fatal(err)
			}
			weights = append(weights, checkpoint.Tensor{Name: path, DType: v.DType(), Shape: v.Shape(), Data: v.Data()})
		}
	}
	raw := filepath.Join(t.TempDir(), "weights.safetensors")
	if err := checkpoint.WriteSafetensors(raw, weights, nil); err != nil {
		t.Fatal(err)
	}
	first := func(from string) (float64, error) {
		c := tinyConfig(t, "32-true")
		c.InitFrom, c.Steps = from, 1
		sum, err := Run(context.Background(), c, false, quiet{})
		if err != nil {
			return 0, err
		}
		return sum.FirstValLoss, nil
	}
	fromRun, err := first(base.Out)
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := first(raw)
	if err != nil {
		t.Fatal(err)
	}
	if fromRun != fromFile {
		t.Fatalf("first validation loss %v from the run folder, %v from its weights as a file", fromRun, fromFile)
	}
	weights = append(weights, checkpoint.Tensor{Name: "head.extra", DType: weights[0].DType, Shape: weights[0].Shape, Data: weights[0].Data})
	if err := checkpoint.WriteSafetensors(raw, weights, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := first(raw); err == nil || !strings.Contains(err.Error(), "head.extra") {
		t.Fatalf("a weights file with head.extra: %v", err)
	}
}

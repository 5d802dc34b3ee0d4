package train

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/local"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/tensor"
)

// closeLosses requires the losses logged in two run folders to agree to
// rel relative.
func closeLosses(t *testing.T, got, want string, rel float64) {
	t.Helper()
	g, w := losses(t, got), losses(t, want)
	if len(g) != len(w) {
		t.Fatalf("%d losses, want %d", len(g), len(w))
	}
	for i := range w {
		if math.Abs(g[i]-w[i]) > rel*math.Abs(w[i]) {
			t.Fatalf("step %d: loss %.15g, one device %.15g", i, g[i], w[i])
		}
	}
}

// oneDeviceRun is the one-device run the mesh tests follow: 6 steps of the
// tiny gpt in 64-true, saving and validating every 3.
func oneDeviceRun(t *testing.T) Config {
	c := tinyConfig(t, "64-true")
	c.Steps, c.SaveEvery, c.EvalEvery = 6, 3, 3
	if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTensorParallelTrain: weft train's gpt (2 heads) in 64-true on --tp 2,
// alone and on a 2×2 mesh under every data-parallel strategy, logs the
// one-device losses to 1e-9, validation included; a --tp 2 checkpoint
// holds whole weights and moments and resumes on one device and on
// --tp 2 alike, and a 2×2 fsdp run's resumes on a 1×2 mesh.
func TestTensorParallelTrain(t *testing.T) {
	c := oneDeviceRun(t)
	for _, mesh := range []struct {
		strategy   string
		devices, t int
	}{{"single", 2, 2}, {"ddp", 4, 2}, {"zero1", 4, 2}, {"zero2", 4, 2}, {"fsdp", 4, 2}} {
		t.Run(fmt.Sprintf("%s/%d/tp%d", mesh.strategy, mesh.devices, mesh.t), func(t *testing.T) {
			tp := c
			tp.Strategy, tp.Devices, tp.TP, tp.Out = mesh.strategy, mesh.devices, mesh.t, t.TempDir()
			if _, err := Run(context.Background(), tp, false, quiet{}); err != nil {
				t.Fatal(err)
			}
			closeLosses(t, tp.Out, c.Out, 1e-9)
			if w, ok := consolidated(t, tp.Out).Tensor("model.blocks.0.proj.weight"); !ok || !tensor.EqualShape(w.Shape, []int{c.GPT.Width, c.GPT.Width}) {
				t.Fatalf("the consolidated proj weight is %v, want the whole [%d %d]", w.Shape, c.GPT.Width, c.GPT.Width)
			}
		})
	}
	t.Run("resume/fsdp-2x2-then-tp2", func(t *testing.T) {
		split := c
		split.Out, split.Steps, split.Strategy, split.TP, split.Devices = t.TempDir(), 3, "fsdp", 2, 4
		if _, err := Run(context.Background(), split, false, quiet{}); err != nil {
			t.Fatal(err)
		}
		split.Steps, split.Strategy, split.Devices = c.Steps, "single", 2
		if _, err := Run(context.Background(), split, true, quiet{}); err != nil {
			t.Fatal(err)
		}
		closeLosses(t, split.Out, c.Out, 1e-9)
	})
	// Half on tp 2, resumed on one device; half on one device, resumed on tp 2.
	for _, first := range []int{2, 1} {
		t.Run(fmt.Sprintf("resume/tp%d-then-tp%d", first, 3-first), func(t *testing.T) {
			split := c
			split.Out, split.Steps, split.TP, split.Devices = t.TempDir(), 3, first, first
			if _, err := Run(context.Background(), split, false, quiet{}); err != nil {
				t.Fatal(err)
			}
			f, err := checkpoint.ReadSafetensors(split.Out + "/checkpoints/step-000003/state.safetensors")
			if err != nil {
				t.Fatal(err)
			}
			if w, ok := f.Tensor("optim.blocks.0.qkv.weight.exp_avg"); !ok || w.Shape[0] != 3*c.GPT.Width {
				t.Fatalf("the checkpoint's qkv moment is %v, want the whole [%d %d]", w.Shape, 3*c.GPT.Width, c.GPT.Width)
			}
			split.Steps, split.TP, split.Devices = c.Steps, 3-first, 3-first
			if _, err := Run(context.Background(), split, true, quiet{}); err != nil {
				t.Fatal(err)
			}
			closeLosses(t, split.Out, c.Out, 1e-9)
		})
	}
}

// TestTensorParallelBadInputs: meshes weft train cannot run fail before
// any step, saying why.
func TestTensorParallelBadInputs(t *testing.T) {
	for _, tc := range []struct {
		model, strategy string
		devices, tp     int
		want            string
		precision       string // "": 32-true
	}{
		{"gpt", "ddp", 4, 3, "tp 3 does not divide devices 4", ""},
		{"cnn", "single", 2, 2, `model "cnn" has no tensor-parallel plan`, ""},
		{"gpt", "ddp", 4, -1, "tp -1: must be at least 1", ""},
	} {
		c := tinyConfig(t, cmp.Or(tc.precision, "32-true"))
		c.Model, c.Strategy, c.Devices, c.TP = tc.model, tc.strategy, tc.devices, tc.tp
		_, err := Run(context.Background(), c, false, quiet{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc, err, tc.want)
		}
	}
}

// TestTensorParallelHybrid: the hybrid's decoder splits by the gpt's plan
// under "decoder." (its vision encoder stays replicated) and trains as on
// one device, to 1e-9.
func TestTensorParallelHybrid(t *testing.T) {
	c := Defaults()
	c.Model, c.Precision, c.Steps, c.EvalEvery, c.EvalBatches, c.SaveEvery, c.Out = "hybrid", "64-true", 3, 3, 1, 3, t.TempDir()
	if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	tp := c
	tp.Devices, tp.TP, tp.Out = 2, 2, t.TempDir()
	if _, err := Run(context.Background(), tp, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	closeLosses(t, tp.Out, c.Out, 1e-9)
}

// TestTensorParallelPrecisions: FP8 (transformer-engine, torchao's rowwise
// recipes) and NF4 frozen weights (each rank quantizing its own shares)
// train on --tp 2 through weft train: the validation loss falls.
func TestTensorParallelPrecisions(t *testing.T) {
	for _, spec := range []string{"transformer-engine", "bf16-true+nf4-dq", "bf16-mixed+fp8-rowwise", "bf16-mixed+fp8-rowwise-gw-hp", "bf16-mixed+mxfp4", "bf16-mixed+nvfp4"} {
		t.Run(spec, func(t *testing.T) {
			c := tinyConfig(t, spec)
			c.Steps, c.EvalEvery, c.SaveEvery, c.Devices, c.TP = 8, 8, 8, 2, 2
			c.GPT.Width = 64 // shares of whole 32-element MX blocks
			sum, err := Run(context.Background(), c, false, quiet{})
			if err != nil {
				t.Fatal(err)
			}
			if !(sum.LastValLoss < sum.FirstValLoss) {
				t.Errorf("validation loss %v -> %v", sum.FirstValLoss, sum.LastValLoss)
			}
		})
	}
}

// TestTensorParallelOptimizerState: low-bit AdamW state (each rank's
// blocks those of its share) and stochastic rounding (each element's bits
// those of its index in the whole weight) train weft train's gpt on --tp
// 2, alone and under zero2 on a 2×2 mesh: the losses are finite and the
// validation loss falls; and 8 steps straight log the losses of 4 saved
// under tp 2 and resumed on tp 2, bit for bit. Low-bit moments saved on
// tp 2 do not resume on one device, whose blocks are not the shares'.
func TestTensorParallelOptimizerState(t *testing.T) {
	for _, spec := range []string{"bf16-mixed+adamw8bit", "bf16-mixed+adamw4bit", "bf16-mixed+adamwfp8", "bf16-true(stochastic_round=true)"} {
		for _, mesh := range []struct {
			strategy   string
			devices, t int
		}{{"single", 2, 2}, {"zero2", 4, 2}} {
			t.Run(fmt.Sprintf("%s/%s/%d", spec, mesh.strategy, mesh.devices), func(t *testing.T) {
				c := tinyConfig(t, spec)
				c.Steps, c.EvalEvery, c.SaveEvery = 8, 4, 4
				c.Strategy, c.Devices, c.TP = mesh.strategy, mesh.devices, mesh.t
				sum, err := Run(context.Background(), c, false, quiet{})
				if err != nil {
					t.Fatal(err)
				}
				for i, l := range losses(t, c.Out) {
					if math.IsNaN(l) || math.IsInf(l, 0) {
						t.Fatalf("step %d: loss %v", i, l)
					}
				}
				if !(sum.LastValLoss < sum.FirstValLoss) {
					t.Errorf("validation loss %v -> %v", sum.FirstValLoss, sum.LastValLoss)
				}
				split := c
				split.Out, split.Steps = t.TempDir(), 4
				if _, err := Run(context.Background(), split, false, quiet{}); err != nil {
					t.Fatal(err)
				}
				split.Steps = c.Steps
				if _, err := Run(context.Background(), split, true, quiet{}); err != nil {
					t.Fatal(err)
				}
				sameLosses(t, c.Out, split.Out)
				if strings.Contains(spec, "+adamw") && mesh.strategy == "single" {
					one := c
					one.Steps, one.Devices, one.TP = 12, 1, 1
					_, err := Run(context.Background(), one, true, quiet{})
					if want := "holds low-bit optimizer moments of tp 2 shares, each blocked on its own; resume it on --tp 2"; err == nil || !strings.Contains(err.Error(), want) {
						t.Errorf("resuming on one device: %v, want %q", err, want)
					}
				}
			})
		}
	}
}

// TestResumeNamesTheMesh: a resume onto another mesh says so, as it says
// a changed strategy or device count.
func TestResumeNamesTheMesh(t *testing.T) {
	was, is := Config{ParallelConfig: ParallelConfig{Strategy: "fsdp", Devices: 4, TP: 2}}, Config{ParallelConfig: ParallelConfig{Strategy: "fsdp", Devices: 4, TP: 1}}
	if a, b := strategyOf(was), strategyOf(is); a == b || !strings.Contains(a, "tp 2") {
		t.Errorf("a 2×2 mesh reads %q, 4 data-parallel ranks %q", a, b)
	}
}

// TestSequenceParallelTrain: weft train's gpt in 64-true with
// --sequence-parallel on --tp 2, alone and under fsdp on a 2×2 mesh and
// with two micro-batches a step, logs the one-device losses to 1e-9,
// validation included, and its checkpoint resumes without sequence
// parallelism; a sequence that the row's ranks cannot share, and sequence
// parallelism without tp, are refused before anything runs.
func TestSequenceParallelTrain(t *testing.T) {
	c := oneDeviceRun(t)
	for _, mesh := range []struct {
		strategy          string
		devices, t, accum int
	}{{"single", 2, 2, 1}, {"fsdp", 4, 2, 1}, {"single", 2, 2, 2}} {
		t.Run(fmt.Sprintf("%s/%d/tp%d/accum%d", mesh.strategy, mesh.devices, mesh.t, mesh.accum), func(t *testing.T) {
			one := c
			if mesh.accum > 1 { // the one-device run accumulates alike
				one.GradAccum, one.Out = mesh.accum, t.TempDir()
				if _, err := Run(context.Background(), one, false, quiet{}); err != nil {
					t.Fatal(err)
				}
			}
			sp := one
			sp.Strategy, sp.Devices, sp.TP, sp.SequenceParallel, sp.Out = mesh.strategy, mesh.devices, mesh.t, true, t.TempDir()
			if _, err := Run(context.Background(), sp, false, quiet{}); err != nil {
				t.Fatal(err)
			}
			closeLosses(t, sp.Out, one.Out, 1e-9)
		})
	}
	t.Run("resume/sequence-then-tp", func(t *testing.T) {
		sp := c
		sp.Out, sp.Steps, sp.TP, sp.Devices, sp.SequenceParallel = t.TempDir(), 3, 2, 2, true
		if _, err := Run(context.Background(), sp, false, quiet{}); err != nil {
			t.Fatal(err)
		}
		sp.Steps, sp.SequenceParallel = c.Steps, false
		if _, err := Run(context.Background(), sp, true, quiet{}); err != nil {
			t.Fatal(err)
		}
		closeLosses(t, sp.Out, c.Out, 1e-9)
	})
	for _, bad := range []struct {
		tp, devices, context int
		want                 string
	}{
		{1, 1, c.GPT.Context, "sequence parallel: needs tp above 1"},
		{2, 2, 7, "sequence parallel: a context of 7 positions does not split over tp 2"},
	} {
		sp := c
		sp.TP, sp.Devices, sp.GPT.Context, sp.SequenceParallel, sp.Out = bad.tp, bad.devices, bad.context, true, t.TempDir()
		if _, err := Run(context.Background(), sp, false, quiet{}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("tp %d, context %d: error %v, want %q", bad.tp, bad.context, err, bad.want)
		}
	}
}

// TestNewFabricPlacement: NewFabric arranges world's ranks as a mesh when
// tp is above 1 (Setup splits the model over a row, the strategy runs
// over a column), and refuses a placement that cannot run.
func TestNewFabricPlacement(t *testing.T) {
	world := local.NewGroup(4, local.Options{})
	cfg := func() fabric.Config { return fabric.Config{Strategy: "fsdp"} }
	for _, c := range []struct {
		p    Placement
		want string
	}{
		{Placement{Model: "gpt", TP: 1, SequenceParallel: true}, "sequence parallel: needs tp above 1"},
		{Placement{Model: "cnn", TP: 2}, "cnn"},
	} {
		if _, _, err := NewFabric(context.Background(), world[0], c.p, cfg()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %q", c.p, err, c.want)
		}
	}
	err := comm.Each(world, func(_ int, w comm.Communicator) error {
		f, closeMesh, err := NewFabric(context.Background(), w, Placement{Model: "gpt", TP: 2}, cfg())
		if err != nil {
			return err
		}
		defer closeMesh()
		m := models.NewGPT(nn.NewInit(1), models.GPTConfig{Vocab: 32, Context: 8, Width: 16, Heads: 2, Layers: 1})
		if err := f.Setup(m, optim.NewSGD(nn.Parameters(m), 0.1)); err != nil {
			return err
		}
		if f.Layout() == nil || f.Layout().Group.Size() != 2 || f.Rank() == nil || f.Rank().Comm().Size() != 2 {
			return fmt.Errorf("rank %d: a row of %v and a column of %v; want 2 and 2", w.Rank(), f.Layout(), f.Rank())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

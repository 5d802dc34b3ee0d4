package train

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

func tinyConfig(t *testing.T, precision string) Config {
	c := Defaults()
	c.GPT = models.GPTConfig{Layers: 1, Width: 32, Heads: 2, Context: 16}
	c.Precision, c.Steps, c.BatchSize, c.EvalEvery, c.EvalBatches, c.SaveEvery = precision, 20, 4, 5, 2, 10
	c.CorpusBytes, c.Out = 1<<20, t.TempDir()
	return c
}

// TestWeightDecayTrains: the weight decay setting reaches the optimizer:
// the same run without it logs other losses after its first step.
func TestWeightDecayTrains(t *testing.T) {
	run := func(decay float64) []float64 {
		c := tinyConfig(t, "32-true")
		c.Steps, c.EvalEvery, c.SaveEvery, c.WeightDecay, c.LR = 4, 4, 4, decay, 3e-2
		if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
			t.Fatal(err)
		}
		return losses(t, c.Out)
	}
	with, without := run(0.5), run(0)
	if with[0] != without[0] || slices.Equal(with, without) {
		t.Errorf("losses with weight decay 0.5 %v, without %v: want the same first loss and then others", with, without)
	}
}

func losses(t *testing.T, out string) []float64 {
	ms, err := readMetrics(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var ls []float64
	for _, m := range ms {
		ls = append(ls, float64(m.Loss))
	}
	return ls
}

// sameLosses requires the resumed run in split to have logged the losses
// of the straight one, bit for bit.
func sameLosses(t *testing.T, straight, split string) {
	t.Helper()
	want, got := losses(t, straight), losses(t, split)
	if len(got) != len(want) {
		t.Fatalf("%d losses after resuming, %d straight", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("step %d: resumed loss %v, straight %v", i, got[i], want[i])
		}
	}
}

// straightAndResumed runs c straight, then again in a fresh folder,
// stopped after half steps and resumed, and returns that folder.
func straightAndResumed(t *testing.T, c Config, half int) string {
	t.Helper()
	if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	split := c
	split.Out, split.Steps = t.TempDir(), half
	if _, err := Run(context.Background(), split, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	split.Steps = c.Steps
	if _, err := Run(context.Background(), split, true, quiet{}); err != nil {
		t.Fatal(err)
	}
	return split.Out
}

// TestResumeIsExact: 20 steps straight and 10 + resume 10 give bit-identical
// losses, loss scales included (scaler state), in bf16 (AdamW state),
// rounded stochastically (the steps in AdamW's state pick the bits),
// with FP8 delayed scaling (amax histories), with NVFP4 (the counts of
// gradient casts pick their stochastic rounding's bits) and with low-bit
// AdamW state (codes and scales).
func TestResumeIsExact(t *testing.T) {
	for _, spec := range []string{"32-true", "16-mixed", "bf16-true", "bf16-true(stochastic_round=true)", "bf16-mixed+fp8", "bf16-mixed+nvfp4", "bf16-mixed+adamw8bit", "bf16-mixed+adamw4bit", "bf16-mixed+adamwfp8"} {
		t.Run(spec, func(t *testing.T) {
			straight := tinyConfig(t, spec)
			sameLosses(t, straight.Out, straightAndResumed(t, straight, 10))
		})
	}
}

// TestInterruptedCheckpointLeavesLatest: a checkpoint folder left half
// written (the process killed mid-write) is never what resume loads.
func TestInterruptedCheckpointLeavesLatest(t *testing.T) {
	c := tinyConfig(t, "32-true")
	c.Steps = 10
	if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(c.Out, "checkpoints")
	half := filepath.Join(dir, ".tmp-step-000020")
	if err := os.MkdirAll(half, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(half, "state.safetensors"), []byte("\x10\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, _, err := LatestCheckpoint(dir)
	if err != nil || m.Step != 10 {
		t.Fatalf("latest after an interrupted write: %+v, %v", m, err)
	}
	c.Steps = 12
	if _, err := Run(context.Background(), c, true, quiet{}); err != nil {
		t.Fatalf("resume past an interrupted write: %v", err)
	}
}

// TestPeakAllocReported: every metrics line carries the step's allocator
// peak, which holds at least the weights, their gradients and AdamW's two
// moments (all float32 in 32-true), and the summary reports the largest.
func TestPeakAllocReported(t *testing.T) {
	c := tinyConfig(t, "32-true")
	c.Steps = 6
	sum, err := Run(context.Background(), c, false, quiet{})
	if err != nil {
		t.Fatal(err)
	}
	task, err := newTask(c)
	if err != nil {
		t.Fatal(err)
	}
	var weights int64
	for _, p := range nn.Parameters(task.newModel()) {
		weights += int64(p.Var.Value.Bytes())
	}
	ms, err := readMetrics(filepath.Join(c.Out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var largest float64
	for _, m := range ms {
		if m.PeakAllocMiB*(1<<20) < float64(4*weights) {
			t.Errorf("step %d: peak alloc %.3f MiB, below the %.3f MiB of weights, gradients and moments", m.Step, m.PeakAllocMiB, float64(4*weights)/(1<<20))
		}
		largest = max(largest, m.PeakAllocMiB)
	}
	if got := float64(sum.PeakAllocBytes) / (1 << 20); got != largest {
		t.Errorf("summary peak alloc %v MiB, the steps' largest %v", got, largest)
	}
}

func TestBadInputs(t *testing.T) {
	c := tinyConfig(t, "32-true")
	if _, err := Run(context.Background(), c, true, quiet{}); err == nil {
		t.Error("resume without a checkpoint must fail")
	}
	bad := c
	bad.Precision = "fp9"
	if _, err := Run(context.Background(), bad, false, quiet{}); err == nil {
		t.Error("unknown precision must fail")
	}
	cfg := filepath.Join(t.TempDir(), "run.yaml")
	os.WriteFile(cfg, []byte("model: {name: gpt}\nstepz: 3\n"), 0o644)
	if _, err := LoadConfig(cfg, &c); err == nil {
		t.Error("an unknown config key must fail")
	}
}

// TestHybridTwoPrecisions trains the hybrid model with its CNN in 16-mixed
// and its transformer in bf16-true: the loss at least halves, and the plan
// shows the two compute dtypes in the two parts.
func TestHybridTwoPrecisions(t *testing.T) {
	c := Defaults()
	c.Model, c.Precision, c.Modules = "hybrid", "bf16-true", []ModuleFor{{Match: "vision.**", Precision: "16-mixed"}}
	c.Steps, c.BatchSize, c.EvalEvery, c.EvalBatches, c.SaveEvery, c.Out = 120, 16, 60, 2, 120, t.TempDir()
	var plan *fabric.Plan
	if _, err := Run(context.Background(), c, false, planSpy{plan: &plan}); err != nil {
		t.Fatal(err)
	}
	ls := losses(t, c.Out)
	first, last := mean(ls[:5]), mean(ls[len(ls)-5:])
	if !(last <= first/2) {
		t.Fatalf("loss went from %.3f to %.3f, want at least halved", first, last)
	}
	for _, m := range plan.Modules {
		want := map[string]string{"vision.conv1": "float16", "vision.proj": "float16", "decoder.blocks.0.fc": "bfloat16", "decoder.head": "bfloat16"}[m.Path]
		if want != "" && m.Compute["gemm"] != want {
			t.Errorf("%s computes GEMMs in %s, want %s", m.Path, m.Compute["gemm"], want)
		}
	}
	if plan.LossScaling == "none" {
		t.Error("float16 vision must bring a loss scaler")
	}
}

type planSpy struct {
	quiet
	plan **fabric.Plan
}

func (s planSpy) Plan(p *fabric.Plan, _ int) { *s.plan = p }

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// TestNonFiniteLossStops: 16-true's AdamW eps underflows and the
// optimizer step of step 0 leaves NaN in the weights. Saving after it
// refuses to write them, naming the parameter and the cause, and no
// checkpoint becomes the latest; without that save, the NaN loss of step
// 1 stops the run, --on-nan skip or not: no batch can train NaN weights.
func TestNonFiniteLossStops(t *testing.T) {
	c := tinyConfig(t, "16-true")
	c.Steps, c.SaveEvery = 5, 1
	_, err := Run(context.Background(), c, false, quiet{})
	if err == nil {
		t.Fatal("NaN weights must stop the run")
	}
	for _, want := range []string{"step 0", "tok.weight", "eps", "float16", "not saved"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if m, _, err := LatestCheckpoint(filepath.Join(c.Out, "checkpoints")); err == nil {
		t.Fatalf("a checkpoint of NaN weights became the latest: step %d", m.Step)
	}
	for _, onNaN := range []string{"stop", "skip"} {
		c.OnNaN, c.Out, c.SaveEvery = onNaN, t.TempDir(), 1000
		_, err := Run(context.Background(), c, false, quiet{})
		if err == nil || strings.Count(err.Error(), "\n") > 0 {
			t.Fatalf("on_nan %s: %v; want a one-line error", onNaN, err)
		}
		for _, want := range []string{"step 1:", "NaN", `"tok"`, "tok.weight", "cannot mend"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("on_nan %s: error %q lacks %q", onNaN, err, want)
			}
		}
	}
}

// TestShardedResume: FSDP on 2 ranks resumes exactly from its own sharded
// checkpoint, and the same checkpoint loads onto 4 ranks of ZeRO-1 and
// onto one device, continuing close to the straight run; so do 8-bit
// AdamW moments (adamw8bit), whose chunks are whole blocks.
func TestShardedResume(t *testing.T) {
	for _, spec := range []string{"32-true", "32-true+adamw8bit", "bf16-mixed+adamw8bit"} {
		t.Run(spec, func(t *testing.T) { shardedResume(t, spec) })
	}
}

func shardedResume(t *testing.T, spec string) {
	straight := tinyConfig(t, spec)
	straight.Strategy, straight.Devices = "fsdp", 2
	if _, err := Run(context.Background(), straight, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	want := losses(t, straight.Out)
	for _, to := range []struct {
		strategy string
		devices  int
		exact    bool
	}{{"fsdp", 2, true}, {"zero1", 4, false}, {"single", 1, false}} {
		c := tinyConfig(t, spec)
		c.Strategy, c.Devices, c.Steps = "fsdp", 2, 10
		if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
			t.Fatal(err)
		}
		c.Strategy, c.Devices, c.Steps = to.strategy, to.devices, 20
		if _, err := Run(context.Background(), c, true, quiet{}); err != nil {
			t.Fatalf("resume on %d ranks of %s: %v", to.devices, to.strategy, err)
		}
		got := losses(t, c.Out)
		for i := range want {
			if d := math.Abs(got[i] - want[i]); (to.exact && d != 0) || d > 1e-4*want[i] {
				t.Fatalf("%s×%d: step %d loss %v, straight %v", to.strategy, to.devices, i, got[i], want[i])
			}
		}
	}
}

// TestShardedResumeFrozen: FSDP resumes exactly with frozen quantized
// weights, whose sharded codes come from setup, not the checkpoint (the
// resume once re-cut them from nothing and panicked).
func TestShardedResumeFrozen(t *testing.T) {
	for _, spec := range []string{"bf16-true+nf4-dq", "bf16-true+int8"} {
		t.Run(spec, func(t *testing.T) {
			straight := tinyConfig(t, spec)
			straight.Strategy, straight.Devices = "fsdp", 2
			sameLosses(t, straight.Out, straightAndResumed(t, straight, 10))
		})
	}
}

// TestResumeUnderFreezingPrecision: resuming a run under a precision that
// freezes its Linears' weights into codes (which no parameter holds) says
// to start from the run with --init-from, which works.
func TestResumeUnderFreezingPrecision(t *testing.T) {
	c := tinyConfig(t, "bf16-mixed")
	c.Steps = 2
	if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	c.Precision, c.Steps = "bf16-true+nf4-dq", 4
	_, err := Run(context.Background(), c, true, quiet{})
	if err == nil || !strings.Contains(err.Error(), "--init-from "+c.Out) {
		t.Fatalf("resume under nf4-dq: %v; want the advice to start with --init-from %s", err, c.Out)
	}
	from := c.Out
	c.InitFrom, c.Out = from, t.TempDir()
	if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
		t.Fatalf("--init-from %s under nf4-dq: %v", from, err)
	}
}

func TestConsolidate(t *testing.T) {
	c := tinyConfig(t, "32-true")
	c.Strategy, c.Devices, c.Steps = "zero2", 2, 4
	if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	f := consolidated(t, c.Out)
	w, ok1 := f.Tensor("model.blocks.0.fc.weight")
	m, ok2 := f.Tensor("optim.blocks.0.fc.weight.exp_avg_sq")
	if !ok1 || !ok2 || !tensor.EqualShape(w.Shape, m.Shape) {
		t.Fatalf("consolidated file lacks whole moments: %v %v", w.Shape, m.Shape)
	}
}

// consolidated is the file Consolidate writes of run's latest checkpoint.
func consolidated(t *testing.T, run string) *checkpoint.File {
	t.Helper()
	out := filepath.Join(t.TempDir(), "whole.safetensors")
	if err := Consolidate(run, out); err != nil {
		t.Fatal(err)
	}
	f, err := checkpoint.ReadSafetensors(out)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestQLoRA fine-tunes a trained gpt on another part of the Go corpus with
// its weights in nf4-dq and only LoRA adapters training: that part's
// validation loss falls, and the quantized weights take under 30% of bf16's.
func TestQLoRA(t *testing.T) {
	base := tinyConfig(t, "32-true")
	base.Steps = 30
	if _, err := Run(context.Background(), base, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	c := tinyConfig(t, "bf16-true+nf4-dq")
	c.InitFrom, c.CorpusPart, c.Steps, c.EvalEvery = base.Out, "net/", 40, 20
	c.LoRA = LoRA{Targets: []string{"blocks.*.qkv", "blocks.*.fc"}, Rank: 8, Alpha: 16}
	sum, err := Run(context.Background(), c, false, quiet{})
	if err != nil {
		t.Fatal(err)
	}
	if !(sum.LastValLoss < sum.FirstValLoss) {
		t.Errorf("net/ validation loss %.4f -> %.4f: no better", sum.FirstValLoss, sum.LastValLoss)
	}
	if sum.BF16Bytes == 0 || float64(sum.QuantizedBytes) > 0.3*float64(sum.BF16Bytes) {
		t.Errorf("quantized weights take %d bytes, bf16 %d", sum.QuantizedBytes, sum.BF16Bytes)
	}
}

// TestQuantizedFSDP: 4-bit weights train under FSDP (Lightning refuses
// bitsandbytes with FSDP).
func TestQuantizedFSDP(t *testing.T) {
	c := tinyConfig(t, "bf16-true+nf4-dq")
	c.Strategy, c.Devices, c.Steps = "fsdp", 2, 6
	sum, err := Run(context.Background(), c, false, quiet{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.QuantizedBytes == 0 || !(sum.LastValLoss < sum.FirstValLoss) {
		t.Fatalf("quantized FSDP run: %+v", sum)
	}
}

// TestActivationCheckpointingIsExact trains through Run with and without
// activation checkpointing, on several ranks of each sharding strategy and
// under a per-module policy whose scope encloses the checkpointed blocks:
// losses and final weights agree bit for bit.
func TestActivationCheckpointingIsExact(t *testing.T) {
	for _, c := range []matrixCell{
		{model: "gpt", precision: "bf16-mixed+fp8", strategy: "fsdp", devices: 2},
		{model: "gpt", precision: "16-mixed", strategy: "ddp", devices: 2},
		{model: "gpt", precision: "bf16-mixed", strategy: "zero2", devices: 2},
		{model: "gpt", precision: "32-true", strategy: "zero1", devices: 2},
		{model: "hybrid", precision: "bf16-true", strategy: "single", devices: 1, rules: []ModuleFor{
			{Match: "vision.**", Precision: "16-mixed"}, {Match: "decoder.**", Precision: "bf16-mixed+fp8-current"}}},
	} {
		t.Run(c.String(), func(t *testing.T) {
			plain, ckpt := runCell(c, t.TempDir(), false), runCell(c, t.TempDir(), true)
			if plain.err != "" || ckpt.err != "" {
				t.Fatalf("errors: %q without checkpointing, %q with", plain.err, ckpt.err)
			}
			if !slices.Equal(plain.losses, ckpt.losses) || plain.state != ckpt.state {
				t.Errorf("losses %v (weights %x) without checkpointing, %v (%x) with", plain.losses, plain.state[:6], ckpt.losses, ckpt.state[:6])
			}
		})
	}
}

// TestActivationCheckpointingConfig: the YAML key sets the modules, and a
// pattern that names none stops the run before any step.
func TestActivationCheckpointingConfig(t *testing.T) {
	c := tinyConfig(t, "32-true")
	if _, err := ParseConfig([]byte("parallel: {activation_checkpointing: [blocks.*]}\n"), &c); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.ActivationCheckpointing, []string{"blocks.*"}) {
		t.Fatalf("activation_checkpointing parsed as %q", c.ActivationCheckpointing)
	}
	c.ActivationCheckpointing = []string{"blocks.*.attn"}
	_, err := Run(context.Background(), c, false, quiet{})
	if err == nil || !strings.Contains(err.Error(), `activation checkpointing "blocks.*.attn": matches no module; nearest: `) {
		t.Errorf("Run: %v, want the pattern named with the nearest modules", err)
	}
}

// TestShardUnitsAreExact: under fsdp, which modules are units and whether
// they are gathered again for backward change when parameters exist
// whole, never the arithmetic: the trajectory and the weights are those
// of the default units, bit for bit. A pattern that names no module stops
// the run before any step.
func TestShardUnitsAreExact(t *testing.T) {
	run := func(mod func(*Config)) matrixRun {
		c := matrixCell{model: "gpt", precision: "bf16-mixed+fp8", strategy: "fsdp", devices: 2}.config(t.TempDir())
		mod(&c)
		if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
			return matrixRun{err: err.Error()}
		}
		return readRun(c.Out)
	}
	plain := run(func(*Config) {})
	for name, mod := range map[string]func(*Config){
		"blocks only": func(c *Config) { c.ShardUnits = []string{"blocks.*"} },
		"every layer": func(c *Config) { c.ShardUnits = []string{"kind:Linear", "kind:LayerNorm", "kind:Embedding"} },
		"kept":        func(c *Config) { c.ReshardAfterForward = false },
	} {
		got := run(mod)
		if got.err != "" || plain.err != "" || !slices.Equal(got.losses, plain.losses) || got.state != plain.state {
			t.Errorf("%s: losses %v (%x) %s; default units %v (%x) %s", name, got.losses, got.state[:6], got.err, plain.losses, plain.state[:6], plain.err)
		}
	}
	if got := run(func(c *Config) { c.ShardUnits = []string{"block.*"} }); !strings.Contains(got.err, `shard units "block.*": matches no module; nearest: `) {
		t.Errorf("a pattern naming nothing: %q", got.err)
	}
}

// TestAdamW8bitTrains: the gpt trains under bf16-mixed+adamw8bit to
// finite losses whose last five average below the first.
func TestAdamW8bitTrains(t *testing.T) {
	c := tinyConfig(t, "bf16-mixed+adamw8bit")
	c.Steps, c.LR = 40, 1e-2
	if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	ls := losses(t, c.Out)
	var tail float64
	for _, l := range ls[len(ls)-5:] {
		tail += l / 5
	}
	for i, l := range ls {
		if math.IsNaN(l) || math.IsInf(l, 0) {
			t.Fatalf("step %d: loss %v", i, l)
		}
	}
	if !(tail < ls[0]) {
		t.Errorf("losses %v: want the last five's mean below the first", ls)
	}
	t.Logf("loss %.4f at step 1, %.4f over the last five of %d", ls[0], tail, len(ls))
}

package train

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/optim"
)

// float64Spec keeps the whole run in float64, the loss too.
const float64Spec = "params=float64,compute=float64,output=float64"

// TestGradAccumThroughRun: through Run, a batch of 8 in 2 or 4
// micro-batches trains the losses of whole batches of 8 on one device, to
// 1e-9, under ddp and fsdp on 2 ranks and on one device.
func TestGradAccumThroughRun(t *testing.T) {
	run := func(strategy string, devices, k int, sync string) []float64 {
		c := tinyConfig(t, float64Spec)
		c.Strategy, c.Devices, c.GradAccum, c.GradSync = strategy, devices, k, sync
		c.Steps, c.BatchSize, c.EvalEvery, c.SaveEvery = 4, 8, 100, 100
		if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
			t.Fatal(err)
		}
		return losses(t, c.Out)
	}
	want := run("single", 1, 1, "auto")
	for _, c := range []struct {
		strategy string
		devices  int
		k        int
		sync     string
	}{{"single", 1, 4, "auto"}, {"ddp", 2, 2, "auto"}, {"ddp", 2, 4, "every"}, {"fsdp", 2, 2, "auto"}, {"fsdp", 2, 4, "last"}} {
		got := run(c.strategy, c.devices, c.k, c.sync)
		for s := range want {
			if math.Abs(got[s]-want[s]) > 1e-9*want[s] {
				t.Errorf("%+v step %d: loss %v, one batch %v", c, s, got[s], want[s])
			}
		}
	}
}

// TestLRScheduleThroughRun: each step's lr in metrics.jsonl is the
// schedule's, and a run resumed halfway logs the losses and rates of a
// straight one, bit for bit.
func TestLRScheduleThroughRun(t *testing.T) {
	sched := optim.ScheduleConfig{Name: "cosine", Warmup: 3, Decay: 8, MinLR: 1e-4}
	straight := tinyConfig(t, "32-true")
	straight.Steps, straight.LRSchedule, straight.SaveEvery = 10, sched, 5
	split := straightAndResumed(t, straight, 5)
	sameLosses(t, straight.Out, split)
	want := optim.Cosine{Max: straight.LR, Min: 1e-4, Warmup: 3, Decay: 8}
	for _, out := range []string{straight.Out, split} {
		ms, err := readMetrics(filepath.Join(out, "metrics.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.LR != want.LR(m.Step) {
				t.Errorf("%s step %d: lr %v, the schedule's %v", out, m.Step, m.LR, want.LR(m.Step))
			}
		}
	}
}

// TestClipValueThroughRun: a bound no gradient reaches trains as no
// clipping does, bit for bit; a tiny one changes the training.
func TestClipValueThroughRun(t *testing.T) {
	run := func(clip float64) []float64 {
		c := tinyConfig(t, "32-true")
		c.Steps, c.ClipValue = 4, clip
		if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
			t.Fatal(err)
		}
		return losses(t, c.Out)
	}
	none, loose, tight := run(0), run(1e30), run(1e-7)
	for s := range none {
		if loose[s] != none[s] {
			t.Errorf("step %d: clip 1e30 loss %v, no clipping %v", s, loose[s], none[s])
		}
	}
	if tight[3] == none[3] {
		t.Errorf("clip 1e-7 trained the losses of no clipping: %v", tight)
	}
}

// TestClipNormThroughRun: --clip-norm logs each step's gradient norm, and
// 2 ranks of ddp and fsdp train, in float64, the losses and norms of one
// device to 1e-9; the clip changes the training.
func TestClipNormThroughRun(t *testing.T) {
	const clip = 0.05
	run := func(strategy string, devices int, clip float64) []Metrics {
		c := tinyConfig(t, float64Spec)
		c.Strategy, c.Devices, c.ClipNorm = strategy, devices, clip
		c.Steps, c.BatchSize, c.EvalEvery, c.SaveEvery = 3, 8, 100, 100
		return runMetrics(t, c)
	}
	want, none := run("single", 1, clip), run("single", 1, 0)
	if want[2].Loss == none[2].Loss || none[0].GradNorm != nil {
		t.Errorf("clip %v: losses %v, no clipping %v (norm logged %v): the clip must change the training, and only it log norms", clip, want[2].Loss, none[2].Loss, none[0].GradNorm)
	}
	for _, st := range []string{"ddp", "fsdp"} {
		for s, m := range run(st, 2, clip) {
			w := want[s]
			if w.GradNorm == nil || m.GradNorm == nil || !(float64(*w.GradNorm) > clip) {
				t.Fatalf("%s step %d: norm %v, one device %v; want both logged, above %v", st, s, m.GradNorm, w.GradNorm, clip)
			}
			if math.Abs(float64(m.Loss-w.Loss)) > 1e-9*float64(w.Loss) || math.Abs(float64(*m.GradNorm-*w.GradNorm)) > 1e-9*float64(*w.GradNorm) {
				t.Errorf("%s step %d: loss %v norm %v, one device %v and %v", st, s, m.Loss, *m.GradNorm, w.Loss, *w.GradNorm)
			}
		}
	}
}

// runMetrics runs c and returns what it logged in metrics.jsonl.
func runMetrics(t *testing.T, c Config) []Metrics {
	t.Helper()
	if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	ms, err := readMetrics(filepath.Join(c.Out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestJSONLKeepsMetricsFormat: the JSONL logger writes a step's record as
// the Metrics struct encodes it, nulls and omitted fields alike.
func TestJSONLKeepsMetricsFormat(t *testing.T) {
	val := Float(2.5)
	for _, m := range []Metrics{
		{Step: 3, Loss: 1.25, LossScale: 65536, TokensPerS: 1234.5, PeakAllocMiB: 7.75, LR: 3e-4, GradNorm: new(Float(0.5))},
		{Step: 4, Loss: Float(math.NaN()), LossScale: 1, Skipped: true, ValLoss: &val, PeakAllocMiB: 1e-3, LR: 1e-9},
	} {
		var got bytes.Buffer
		if err := fabric.NewJSONL(&got).Log(m.Step, m.fields()); err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != string(want)+"\n" {
			t.Errorf("logger wrote %s, Metrics encodes %s", got.String(), want)
		}
	}
}

// hooks is an observer that also has the fabric's hooks.
type hooks struct {
	quiet
	steps       int
	validations map[int]float64
	checkpoints []string
}

func (h *hooks) OnStepEnd(int, fabric.StepResult) error { h.steps++; return nil }
func (h *hooks) OnValidationEnd(step int, loss float64) error {
	h.validations[step] = loss
	return nil
}
func (h *hooks) OnCheckpoint(_ int, path string) error {
	h.checkpoints = append(h.checkpoints, path)
	return nil
}

// TestCallbacksAndCSV: an observer with hooks hears of every step, of each
// validation with the loss metrics.jsonl logs and of each checkpoint
// saved; metrics.csv holds metrics.jsonl's values, a resumed run's too.
func TestCallbacksAndCSV(t *testing.T) {
	c := tinyConfig(t, "32-true")
	c.Steps, c.EvalEvery, c.SaveEvery, c.Loggers = 6, 2, 3, []string{"jsonl", "csv"}
	h := &hooks{validations: map[int]float64{}}
	c.Steps = 3
	if _, err := Run(context.Background(), c, false, h); err != nil {
		t.Fatal(err)
	}
	c.Steps = 6
	if _, err := Run(context.Background(), c, true, h); err != nil {
		t.Fatal(err)
	}
	ms, err := readMetrics(filepath.Join(c.Out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if h.steps != 6 || len(ms) != 6 {
		t.Errorf("%d step ends heard, %d lines logged; want 6", h.steps, len(ms))
	}
	for _, m := range ms {
		if got, ok := h.validations[m.Step]; ok != (m.ValLoss != nil) || ok && got != float64(*m.ValLoss) {
			t.Errorf("step %d: validation heard %v (%v), logged %v", m.Step, got, ok, m.ValLoss)
		}
	}
	if len(h.checkpoints) != 2 {
		t.Errorf("checkpoints heard: %v; want steps 3 and 6", h.checkpoints)
	}
	for _, p := range h.checkpoints {
		if _, err := os.Stat(p); err != nil {
			t.Error(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(c.Out, "metrics.csv"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rows[0], ",") != "step,"+strings.Join(metricColumns, ",") || len(rows) != 1+len(ms) {
		t.Fatalf("metrics.csv header %v and %d rows; want step and %v, %d rows", rows[0], len(rows)-1, metricColumns, len(ms))
	}
	for i, m := range ms {
		row := rows[1+i]
		loss, _ := strconv.ParseFloat(row[1], 64)
		lr, _ := strconv.ParseFloat(row[7], 64)
		if row[0] != strconv.Itoa(m.Step) || loss != float64(m.Loss) || lr != m.LR || (row[5] != "") != (m.ValLoss != nil) {
			t.Errorf("csv row %v; metrics.jsonl %+v", row, m)
		}
	}
}

// TestLoopBadInputs: each bad loop setting gets one line naming it.
func TestLoopBadInputs(t *testing.T) {
	for _, c := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.GradAccum = 0 }, "grad_accum 0"},
		{func(c *Config) { c.GradAccum = 3 }, "batch size 4 does not split into 3 micro-batches"},
		{func(c *Config) { c.GradSync = "sometimes" }, `grad sync "sometimes": accepted are auto, every, last`},
		{func(c *Config) { c.ClipValue = -1 }, "clip_value -1"},
		{func(c *Config) { c.ClipNorm = math.NaN() }, "clip_norm NaN"},
		{func(c *Config) { c.ClipNorm, c.ClipValue = 1, 1 }, "clip_norm 1 and clip_value 1: clip by one of them"},
		{func(c *Config) { c.LRSchedule.Name = "linear" }, `lr schedule "linear"`},
		{func(c *Config) { c.LRSchedule = optim.ScheduleConfig{Name: "step", Gamma: 0.5} }, "every 0"},
		{func(c *Config) { c.Loggers = []string{"csv"} }, "jsonl is needed"},
		{func(c *Config) { c.Loggers = []string{"jsonl", "tensorboard"} }, "each of [jsonl csv] at most once"},
	} {
		cfg := tinyConfig(t, "32-true")
		c.set(&cfg)
		_, err := Run(context.Background(), cfg, false, quiet{})
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("error %v; want one line with %q", err, c.want)
		}
	}
}

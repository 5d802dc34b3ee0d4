package train

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/comm"
	_ "github.com/weftml/weft/comm/local" // in-process ranks
	_ "github.com/weftml/weft/comm/mpi"   // Open MPI ranks, under mpirun
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/quant"
	"github.com/weftml/weft/strategy"
	"github.com/weftml/weft/tensor"
)

// Metrics is one line of metrics.jsonl; a non-finite loss is written null.
type Metrics struct {
	Step       int     `json:"step"`
	Loss       Float   `json:"loss"`
	LossScale  float64 `json:"loss_scale"`
	TokensPerS float64 `json:"tokens_per_s"` // units per second: tokens for gpt, images otherwise
	Skipped    bool    `json:"skipped,omitempty"`
	ValLoss    *Float  `json:"val_loss,omitempty"`
	// PeakAllocMiB is the most tensor memory live during the step and its
	// evaluation (tensor.Memory's Peak), process-wide: with local ranks,
	// all of them together.
	PeakAllocMiB float64 `json:"peak_alloc_mib"`
	LR           float64 `json:"lr"` // the step's learning rate
}

// Float is a float64 that JSON carries as null when it is inf or NaN.
type Float float64

func (f Float) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(f))
}

func (f *Float) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = Float(math.NaN())
		return nil
	}
	return json.Unmarshal(b, (*float64)(f))
}

// Observer is the one reporting path of a run: everything printed once per
// job goes through it, and only rank 0's is called. Warn comes first (the
// precision's notices), Plan once before the first step, Step after every
// step, Done when the run ends well or stops early (Summary.Stopped). An
// Observer that implements fabric's callback hooks (fabric.StepEndHook,
// ValidationEndHook, CheckpointHook) hears those events too.
type Observer interface {
	Warn(msg string)
	Plan(p *fabric.Plan, startStep int)
	Step(m Metrics, total int)
	Done(s *Summary)
}

// Summary is how a run ended.
type Summary struct {
	FirstValLoss, LastValLoss float64
	Steps                     int // done: Config.Steps unless Stopped
	Checkpoint                string
	// Stopped is why the run stopped before its last step (Run returns
	// it too), nil if it did not.
	Stopped *StoppedError
	// QuantizedBytes is the memory of the quantized weights, BF16Bytes
	// what they would take in bf16 (both 0 without a quantizer).
	QuantizedBytes, BF16Bytes int64
	// PeakAllocBytes is the largest step's PeakAllocMiB, in bytes.
	PeakAllocBytes int64
	// Memory is each process's peaks (one process with in-process ranks).
	Memory []ProcessMemory
}

// Run trains c.Model with c's precision and strategy, resuming from
// c.Out's latest checkpoint (or c.ResumeFrom's) when resume is set; c.Out
// is this run's alone while it runs (see claimRunDir). Devices ranks run as
// goroutines ("local") or as this process's rank of an mpirun job
// ("mpi"); rank 0 reports to obs and its Summary is returned (nil in the
// other processes of an mpirun job).
//
// When ctx is done, the ranks agree to stop at the next step boundary,
// save a checkpoint, and Run returns a *StoppedError; a collective stuck
// on a hung peer is given up a grace period later (see stopper).
func Run(ctx context.Context, c Config, resume bool, obs Observer) (*Summary, error) {
	s, err := resolve(c)
	if err != nil {
		return nil, err
	}
	c = s.c
	plan, err := s.plan()
	if err != nil {
		return nil, err
	}
	if err := s.admit(plan); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return nil, fmt.Errorf("run folder: %w", err)
	}
	release, err := claimRunDir(c, resume, obs)
	if err != nil {
		return nil, err
	}
	defer release()
	comms, err := comm.Open(c.backend(), c.Devices, c.CommTimeout)
	if err != nil {
		return nil, err
	}
	if comms[0].Rank() != 0 { // under mpirun, another process reports
		obs = quiet{}
	}
	for _, w := range s.warnings {
		obs.Warn(w)
	}
	if s.t.about != "" {
		notify(obs, s.t.about)
	}
	stop := newStopper(ctx)
	defer stop.release()
	sums := make([]*Summary, len(comms))
	err = comm.Each(comms, func(i int, cm comm.Communicator) (err error) {
		r := &rankRun{c: c, t: s.t, plan: plan, comm: cm, obs: quiet{}, report: obs, counts: i == 0, stop: stop}
		sums[i], err = r.run(s.pol, s.scaling, s.info, resume)
		return err
	})
	var stopped *StoppedError
	if err != nil && !errors.As(err, &stopped) || comms[0].Rank() != 0 {
		return nil, stop.explain(err)
	}
	obs.Done(sums[0])
	return sums[0], err
}

// quiet is the Observer of ranks other than 0.
type quiet struct{}

func (quiet) Warn(string)            {}
func (quiet) Plan(*fabric.Plan, int) {}
func (quiet) Step(Metrics, int)      {}
func (quiet) Done(*Summary)          {}

// rankRun is one rank's training loop.
type rankRun struct {
	c    Config
	t    *task
	plan *fabric.Plan // the run's (Plan's), which rank 0 prints
	comm comm.Communicator
	obs  Observer // report on rank 0, quiet elsewhere
	// report is the run's Observer, which rank 0 alone calls.
	report Observer
	model  models.Model
	f      *fabric.Fabric
	// counts marks the process's first rank, which measures each step's
	// allocator peak for the process.
	counts bool
	stop   *stopper // its work context is the collectives'
}

func (r *rankRun) run(pol precision.Policy, scaling precision.LossScaling, info strategy.Info, resume bool) (*Summary, error) {
	c, plan := r.c, r.plan
	mesh, err := newRankMesh(r.stop.work, c, r.comm)
	if err != nil {
		return nil, err
	}
	defer mesh.close()
	r.f = fabric.NewPolicy(pol, scaling)
	r.f.SeedEverything(c.Seed)
	if mesh.data.Size() > 1 || info.Sharding.OptimizerState {
		r.f.Distribute(info, mesh.data)
	}
	lead := r.comm.Rank() == 0 // the fabric's IsGlobalZero, on any mesh
	if lead {
		r.obs = r.report
	}
	// Under fsdp no rank builds the whole model: each draws its own chunks
	// from the initialisers at setup. A quantized model is built on shapes
	// under every strategy: setup draws each frozen weight alone before
	// quantizing it, and the rest one tensor at a time, so the float model
	// never exists whole. Weights read from a run, and those a mesh row
	// splits, are built whole.
	empty := (info.Sharding.Parameters || plan.BytesPerRank.Frozen > 0) && c.InitFrom == "" && mesh.mesh == nil
	r.model = r.t.build(r.f.InitModule(empty))
	if c.InitFrom != "" {
		if err := loadWeights(r.f, c.InitFrom, r.model); err != nil {
			return nil, err
		}
	}
	layout, err := mesh.split(c, r.model)
	if err != nil {
		return nil, err
	}
	if layout != nil {
		r.f.SplitTensors(layout, r.comm)
	}
	opt, err := optim.NewAdamW(nn.Parameters(r.model), optim.AdamWConfig{LR: c.LR, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	if err != nil {
		return nil, err
	}
	r.f.ActivationCheckpointing = c.ActivationCheckpointing
	r.f.Sharding.KeepAfterForward = !c.ReshardAfterForward
	r.f.Sharding.Hybrid = mesh.hybrid
	if r.f.Sharding.Units, err = shardUnits(r.model, c.ShardUnits); err != nil {
		return nil, err
	}
	if c.OnNaN == "skip" {
		r.f.OnNonFinite = fabric.SkipNonFinite
	}
	if err := r.f.Setup(r.model, opt); err != nil {
		return nil, err
	}
	schedule, err := r.setUpLoop()
	if err != nil {
		return nil, err
	}
	if lora, ok := loraOf(r.f.Precision()); ok { // QLoRA: only the adapters train
		opt.SetParams(adapterParams(r.f, lora))
	}
	ckpt := checkpointer{dir: filepath.Join(c.Out, "checkpoints"), keep: c.KeepLast, fabric: r.f, comm: r.comm}
	start := 0
	if resume {
		from, err := ckpt.load(c)
		if err != nil {
			return nil, err
		}
		notify(r.obs, fmt.Sprintf("resumed from step %d (%s)", from.step, from.dir))
		for _, n := range from.notes {
			r.obs.Warn("resume: " + n)
		}
		start = from.step
		if start >= c.Steps {
			return nil, fmt.Errorf("resume: the run in %s has already trained %d steps, and steps is %d; give a larger --steps to train on", c.Out, start, c.Steps)
		}
	}
	sum := &Summary{FirstValLoss: math.NaN()}
	sum.QuantizedBytes, sum.BF16Bytes = quantizedBytes(r.model)
	if lead {
		loggers, kept, closeLoggers, err := openLoggers(c, start)
		if err != nil {
			return nil, err
		}
		defer closeLoggers()
		r.f.Loggers = loggers
		if len(kept) > 0 && kept[0].ValLoss != nil { // a resumed run started earlier
			sum.FirstValLoss = float64(*kept[0].ValLoss)
		}
		if err := writePlan(filepath.Join(c.Out, "plan.json"), plan); err != nil {
			return nil, err
		}
	}
	r.obs.Plan(plan, start)
	ctx := r.stop.work
	batches := r.f.SetupDataLoader(fabric.DatasetFunc(func(i uint64) (data.Batch, error) { return r.t.batch(i), nil }))
	batches.Seek(uint64(start))
	for step := start; step < c.Steps; step++ {
		began := time.Now()
		if r.counts {
			tensor.ResetPeak()
		}
		opt.LR = schedule.LR(step)
		b, err := batches.Next()
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
		res, err := r.f.TrainShare(ctx, r.model, b)
		tensor.Free(b.X)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
		m := Metrics{Step: step, Loss: Float(res.Loss), Skipped: res.Skipped, LossScale: r.f.LossScale(), LR: opt.LR}
		m.TokensPerS = float64(r.t.units) / time.Since(began).Seconds()
		if step == 0 || (step+1)%c.EvalEvery == 0 || step+1 == c.Steps {
			v, err := r.evaluate(ctx)
			if err != nil {
				return nil, err
			}
			fv := Float(v)
			m.ValLoss = &fv
			if step == 0 {
				sum.FirstValLoss = v
			}
			sum.LastValLoss = v
			if err := r.f.ValidationEnded(step, v); err != nil {
				return nil, err
			}
		}
		peak := tensor.Memory().Peak
		m.PeakAllocMiB = float64(peak) / (1 << 20)
		sum.PeakAllocBytes = max(sum.PeakAllocBytes, peak)
		if err := r.f.LogDict(step, m.fields()...); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		r.obs.Step(m, c.Steps)
		if err := r.f.StepEnded(step, res); err != nil {
			return nil, err
		}
		saved := (step+1)%c.SaveEvery == 0 || step+1 == c.Steps
		if saved {
			if sum.Checkpoint, err = r.save(ctx, ckpt, step+1); err != nil {
				return nil, err
			}
		}
		r.stop.took(time.Since(began))
		if step+1 == c.Steps {
			break
		}
		stop, err := r.stop.agree(r)
		if err != nil {
			return nil, fmt.Errorf("after step %d: %w", step, err)
		}
		if !stop {
			continue
		}
		if !saved {
			if sum.Checkpoint, err = r.save(ctx, ckpt, step+1); err != nil {
				return nil, err
			}
		}
		sum.Steps = step + 1
		sum.Stopped = &StoppedError{Step: step + 1, Checkpoint: sum.Checkpoint, Cause: cmp.Or(context.Cause(r.stop.ctx), errPeerStopped)}
		return sum, sum.Stopped
	}
	sum.Steps = c.Steps
	if sum.Memory, err = gatherMemory(ctx, r.comm, c.backend() == "mpi", sum.PeakAllocBytes, plan.Peak.Bytes); err != nil {
		return nil, err
	}
	if !lead {
		return sum, nil
	}
	return sum, plotLoss(filepath.Join(c.Out, "metrics.jsonl"), filepath.Join(c.Out, "loss.png"))
}

// evaluate returns the mean loss over EvalBatches validation batches.
func (r *rankRun) evaluate(ctx context.Context) (float64, error) {
	val := r.f.SetupDataLoader(fabric.DatasetFunc(func(i uint64) (data.Batch, error) { return r.t.val(int(i)), nil }))
	var total float64
	for range r.c.EvalBatches {
		b, err := val.Next()
		if err != nil {
			return 0, err
		}
		l, err := r.f.EvalShare(ctx, r.model, b)
		tensor.Free(b.X)
		if err != nil {
			return 0, err
		}
		total += l
	}
	return total / float64(r.c.EvalBatches), nil
}

// policy builds the precision policy of the run; its notices (deprecated
// aliases) go to warn.
func (c Config) policy(warn func(string)) (precision.Policy, precision.LossScaling, error) {
	rules := make([]string, len(c.Modules))
	for i, m := range c.Modules {
		rules[i] = m.Match + "=" + m.Precision
	}
	return precision.ParsePolicy(c.Precision, rules, c.LossScale, precision.Options{Warn: warn})
}

// loraOf returns the LoRA member of p, if it has one.
func loraOf(p precision.Plugin) (*quant.LoRA, bool) {
	for _, m := range precision.Members(p) {
		if l, ok := m.(*quant.LoRA); ok {
			return l, true
		}
	}
	return nil, false
}

// adapterParams are what the optimizer updates under LoRA: the adapters,
// or under a strategy the rank's optimizer parameters that are adapters
// (whole, or this rank's chunks of them where the optimizer is sharded).
func adapterParams(f *fabric.Fabric, lora *quant.LoRA) []nn.NamedParam {
	if f.Rank() == nil {
		return lora.Params()
	}
	adapter := map[string]bool{}
	for _, p := range lora.Params() {
		adapter[p.Path] = true
	}
	var out []nn.NamedParam
	for _, p := range f.Rank().OptimizerParams() {
		if adapter[p.Path] {
			out = append(out, p)
		}
	}
	return out
}

// openMetrics opens metrics.jsonl for appending after step start, keeping
// (and returning) the lines of earlier steps and dropping those at or past
// it, left by a run that went further before being resumed from an
// earlier checkpoint.
func openMetrics(path string, start int) (*os.File, []Metrics, error) {
	lines, err := readMetrics(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	enc := json.NewEncoder(f)
	var kept []Metrics
	for _, m := range lines {
		if m.Step < start {
			if err := enc.Encode(m); err != nil {
				f.Close()
				return nil, nil, err
			}
			kept = append(kept, m)
		}
	}
	return f, kept, nil
}

// readMetrics reads every line of a metrics.jsonl.
func readMetrics(path string) ([]Metrics, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Metrics
	dec := json.NewDecoder(bytes.NewReader(b))
	for dec.More() {
		var m Metrics
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("metrics %s: %w", path, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// writePlan records the resolved precision and memory plan beside the metrics.
func writePlan(path string, p *fabric.Plan) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return checkpoint.WriteFileAtomic(path, b)
}

// quantizedBytes sums the memory of m's quantized weights and what they
// would take in bf16.
func quantizedBytes(m nn.Module) (quantized, bf16 int64) {
	nn.Walk(m, func(_ string, mod nn.Module) {
		if l, ok := mod.(*nn.Linear); ok {
			if w, ok := quant.WeightOf(l); ok {
				quantized += int64(w.Bytes())
				bf16 += int64(dtype.BF16.StorageBytes(w.Shape()[0] * w.Shape()[1]))
			}
		}
	})
	return quantized, bf16
}

// shardUnits is the sharding units the patterns name (nil for none: the
// strategy's default).
func shardUnits(m nn.Module, patterns []string) (strategy.UnitFunc, error) {
	if len(patterns) == 0 {
		return nil, nil
	}
	named, err := precision.Select(m, patterns)
	if err != nil {
		return nil, fmt.Errorf("shard units %w", err)
	}
	return func(_ string, m nn.Module) bool { return named[m] }, nil
}

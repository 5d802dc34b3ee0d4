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
	// GradNorm is the gradients' global L2 norm before clipping, logged
	// with --clip-norm for the steps not skipped.
	GradNorm *Float `json:"grad_norm,omitempty"`
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
// Observer that has methods of fabric.Config's hooks (OnStepEnd,
// OnValidationEnd, OnCheckpoint) hears those events too.
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
		if c.backend() == "mpi" && cm.Size() > 1 {
			if err := checkJob(stop.work, c.Out, s.t, cm); err != nil {
				return err
			}
		}
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
	opt    *optim.AdamW
	// schedule is the learning rate of each step.
	schedule optim.Schedule
	// loggers are rank 0's, opened once the resumed step is known.
	loggers loggers
	// units are the sharding units --shard-units names, chosen once the
	// model is built.
	units shardUnits
	// counts marks the process's first rank, which measures each step's
	// allocator peak for the process.
	counts bool
	stop   *stopper // its work context is the collectives'
}

func (r *rankRun) run(pol precision.Policy, scaling precision.LossScaling, info strategy.Info, resume bool) (*Summary, error) {
	closeMesh, err := r.setUp(pol, scaling, info)
	if closeMesh != nil { // the mesh is made, even if the rest of setUp failed
		defer closeMesh()
	}
	if err != nil {
		return nil, err
	}
	ckpt := checkpointer{dir: filepath.Join(r.c.Out, "checkpoints"), keep: r.c.KeepLast, fabric: r.f, comm: r.comm}
	start := 0
	if resume {
		if start, err = r.resume(ckpt); err != nil {
			return nil, err
		}
	}
	sum, closeOutputs, err := r.outputs(start)
	if err != nil {
		return nil, err
	}
	defer closeOutputs()
	r.obs.Plan(r.plan, start)
	batches := r.f.SetupDataLoader(fabric.DatasetFunc(func(i uint64) (data.Batch, error) { return r.t.batch(i), nil }))
	batches.Seek(uint64(start))
	for step := start; step < r.c.Steps; step++ {
		saved, err := r.step(step, batches, ckpt, sum)
		if err != nil {
			return nil, err
		}
		if step+1 == r.c.Steps {
			break
		}
		if stopped, err := r.stopAfter(step, saved, ckpt, sum); stopped || err != nil {
			return sum, err
		}
	}
	return r.finish(sum)
}

// setUp builds the rank's fabric (through NewFabric, as weft parity
// does), its model and optimizer, and sets them up; it returns what
// closes the rank's mesh once that is made (nil before).
func (r *rankRun) setUp(pol precision.Policy, scaling precision.LossScaling, info strategy.Info) (func() error, error) {
	c, plan := r.c, r.plan
	if r.comm.Rank() == 0 { // the fabric's IsGlobalZero, on any mesh
		r.obs = r.report
	}
	cfg, err := r.fabricConfig(pol, scaling, info.Name)
	if err != nil {
		return nil, err
	}
	f, closeMesh, err := NewFabric(r.stop.work, r.comm, Placement{Model: c.Model, TP: c.TP, SequenceParallel: c.SequenceParallel, ShardSize: c.ShardSize}, cfg)
	if err != nil {
		return nil, err
	}
	r.f = f
	// Under fsdp no rank builds the whole model: each draws its own chunks
	// from the initialisers at setup. A quantized model is built on shapes
	// under every strategy: setup draws each frozen weight alone before
	// quantizing it, and the rest one tensor at a time, so the float model
	// never exists whole. Weights read from a run, and those a mesh row
	// splits, are built whole.
	empty := (info.Sharding.Parameters || plan.BytesPerRank.Frozen > 0) && c.InitFrom == "" && c.TP <= 1
	r.model = r.t.build(r.f.InitModule(empty))
	if c.InitFrom != "" {
		if err := loadWeights(r.f, c.InitFrom, r.model); err != nil {
			return closeMesh, err
		}
	}
	if r.opt, err = optim.NewAdamW(nn.Parameters(r.model), c.adamW()); err != nil {
		return closeMesh, err
	}
	if err := r.units.choose(r.model, c.ShardUnits); err != nil {
		return closeMesh, err
	}
	if err := r.f.Setup(r.model, r.opt); err != nil {
		return closeMesh, err
	}
	if lora, ok := loraOf(r.f.Precision()); ok { // QLoRA: only the adapters train
		r.opt.SetParams(adapterParams(r.f, lora))
	}
	r.schedule, err = c.LRSchedule.Build(c.LR, c.Steps)
	return closeMesh, err
}

// resume loads the checkpoint the run resumes from and returns its step.
func (r *rankRun) resume(ckpt checkpointer) (int, error) {
	from, err := ckpt.load(r.c)
	if err != nil {
		return 0, err
	}
	notify(r.obs, fmt.Sprintf("resumed from step %d (%s)", from.step, from.dir))
	for _, n := range from.notes {
		r.obs.Warn("resume: " + n)
	}
	if from.step >= r.c.Steps {
		return 0, fmt.Errorf("resume: the run in %s has already trained %d steps, and steps is %d; give a larger --steps to train on", r.c.Out, from.step, r.c.Steps)
	}
	return from.step, nil
}

// outputs opens rank 0's loggers after step start and writes plan.json;
// it returns the run's Summary so far and what closes the loggers.
func (r *rankRun) outputs(start int) (*Summary, func(), error) {
	sum := &Summary{FirstValLoss: math.NaN()}
	sum.QuantizedBytes, sum.BF16Bytes = quantizedBytes(r.model)
	if r.comm.Rank() != 0 {
		return sum, func() {}, nil
	}
	opened, kept, closeLoggers, err := openLoggers(r.c, start)
	if err != nil {
		return nil, nil, err
	}
	r.loggers.open = opened
	if len(kept) > 0 && kept[0].ValLoss != nil { // a resumed run started earlier
		sum.FirstValLoss = float64(*kept[0].ValLoss)
	}
	if err := writePlan(filepath.Join(r.c.Out, "plan.json"), r.plan); err != nil {
		closeLoggers()
		return nil, nil, err
	}
	return sum, closeLoggers, nil
}

// step trains step, evaluates and logs it, and saves its checkpoint when
// due (saved).
func (r *rankRun) step(step int, batches *fabric.Loader, ckpt checkpointer, sum *Summary) (saved bool, err error) {
	ctx, c := r.stop.work, r.c
	began := time.Now()
	if r.counts {
		tensor.ResetPeak()
	}
	r.opt.LR = r.schedule.LR(step)
	b, err := batches.Next()
	if err != nil {
		return false, fmt.Errorf("step %d: %w", step, err)
	}
	res, err := r.f.TrainStep(ctx, r.model, b)
	tensor.Free(b.X)
	if err != nil {
		return false, fmt.Errorf("step %d: %w", step, err)
	}
	m := Metrics{Step: step, Loss: Float(res.Loss), Skipped: res.Skipped, LossScale: r.f.LossScale(), LR: r.opt.LR}
	if c.ClipNorm > 0 && !res.Skipped {
		m.GradNorm = new(Float(res.GradNorm))
	}
	m.TokensPerS = float64(r.t.units) / time.Since(began).Seconds()
	if step == 0 || (step+1)%c.EvalEvery == 0 || step+1 == c.Steps {
		if err := r.validate(ctx, step, &m, sum); err != nil {
			return false, err
		}
	}
	peak := tensor.Memory().Peak
	m.PeakAllocMiB = float64(peak) / (1 << 20)
	sum.PeakAllocBytes = max(sum.PeakAllocBytes, peak)
	if err := r.f.LogDict(step, m.fields()...); err != nil {
		return false, fmt.Errorf("metrics: %w", err)
	}
	r.obs.Step(m, c.Steps)
	if saved = (step+1)%c.SaveEvery == 0 || step+1 == c.Steps; saved {
		if sum.Checkpoint, err = ckpt.save(ctx, c, step+1); err != nil {
			return false, err
		}
	}
	r.stop.took(time.Since(began))
	return saved, nil
}

// validate measures the validation loss after step into m and sum.
func (r *rankRun) validate(ctx context.Context, step int, m *Metrics, sum *Summary) error {
	v, err := r.evaluate(ctx)
	if err != nil {
		return err
	}
	fv := Float(v)
	m.ValLoss = &fv
	if step == 0 {
		sum.FirstValLoss = v
	}
	sum.LastValLoss = v
	return nil
}

// stopAfter agrees with the other ranks whether to stop after step and,
// if so, saves a checkpoint there (unless saved) and records why in sum.
func (r *rankRun) stopAfter(step int, saved bool, ckpt checkpointer, sum *Summary) (bool, error) {
	stop, err := r.stop.agree(r)
	if err != nil {
		return false, fmt.Errorf("after step %d: %w", step, err)
	}
	if !stop {
		return false, nil
	}
	if !saved {
		if sum.Checkpoint, err = ckpt.save(r.stop.work, r.c, step+1); err != nil {
			return true, err
		}
	}
	sum.Steps = step + 1
	sum.Stopped = &StoppedError{Step: step + 1, Checkpoint: sum.Checkpoint, Cause: cmp.Or(context.Cause(r.stop.ctx), errPeerStopped)}
	return true, sum.Stopped
}

// finish gathers the processes' memory peaks and, on rank 0, plots the
// loss.
func (r *rankRun) finish(sum *Summary) (*Summary, error) {
	var err error
	sum.Steps = r.c.Steps
	if sum.Memory, err = gatherMemory(r.stop.work, r.comm, r.c.backend() == "mpi", sum.PeakAllocBytes, r.plan.Peak); err != nil {
		return nil, err
	}
	if r.comm.Rank() != 0 {
		return sum, nil
	}
	return sum, plotLoss(filepath.Join(r.c.Out, "metrics.jsonl"), filepath.Join(r.c.Out, "loss.png"))
}

// evaluate returns the mean loss over EvalBatches validation batches.
func (r *rankRun) evaluate(ctx context.Context) (float64, error) {
	val := r.f.SetupDataLoader(fabric.DatasetFunc(func(i uint64) (data.Batch, error) { return r.t.val(int(i)), nil }))
	shares := make([]data.Batch, 0, r.c.EvalBatches)
	defer func() {
		for _, b := range shares {
			tensor.Free(b.X)
		}
	}()
	for range r.c.EvalBatches {
		b, err := val.Next()
		if err != nil {
			return 0, err
		}
		shares = append(shares, b)
	}
	return r.f.EvalLoss(ctx, r.model, shares...)
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

// shardUnits is the sharding units patterns name; the fabric's
// configuration asks it (at Setup) for the modules choose chose once the
// model was built.
type shardUnits struct{ named map[nn.Module]bool }

// choose chooses the modules of m that patterns name.
func (u *shardUnits) choose(m nn.Module, patterns []string) error {
	if len(patterns) == 0 {
		return nil
	}
	named, err := precision.Select(m, patterns)
	if err != nil {
		return fmt.Errorf("shard units %w", err)
	}
	u.named = named
	return nil
}

// unitFunc is the strategy's UnitFunc for patterns (nil for none: the
// strategy's default units).
func (u *shardUnits) unitFunc(patterns []string) strategy.UnitFunc {
	if len(patterns) == 0 {
		return nil
	}
	return func(_ string, m nn.Module) bool { return u.named[m] }
}

// fabricConfig is the fabric's settings of the run on this rank.
func (r *rankRun) fabricConfig(pol precision.Policy, scaling precision.LossScaling, strategyName string) (fabric.Config, error) {
	c := r.c
	var sync fabric.GradSync
	if err := sync.UnmarshalText([]byte(c.GradSync)); err != nil {
		return fabric.Config{}, err
	}
	cfg := fabric.Config{
		Policy: pol, LossScaling: scaling, Strategy: strategyName,
		Sharding:                strategy.Options{KeepAfterForward: !c.ReshardAfterForward, Units: r.units.unitFunc(c.ShardUnits)},
		ActivationCheckpointing: c.ActivationCheckpointing,
		Accumulation:            fabric.Accumulation{MicroBatches: c.GradAccum, Sync: sync},
		ClipValue:               c.ClipValue,
		ClipNorm:                c.ClipNorm,
		Seed:                    c.Seed,
	}
	var err error
	if cfg.EvalPrecision, err = c.evalPrecision(); err != nil {
		return fabric.Config{}, err
	}
	hearHooks(&cfg, r.obs)
	if c.OnNaN == "skip" {
		cfg.OnNonFinite = fabric.SkipNonFinite
	}
	if r.comm.Rank() == 0 {
		cfg.Loggers = []fabric.Logger{&r.loggers}
	}
	return cfg, nil
}

// hearHooks gives cfg the hooks obs has: those of OnStepEnd,
// OnValidationEnd and OnCheckpoint (fabric.Config's) that it implements.
func hearHooks(cfg *fabric.Config, obs Observer) {
	if h, ok := obs.(interface {
		OnStepEnd(step int, res fabric.StepResult) error
	}); ok {
		cfg.OnStepEnd = h.OnStepEnd
	}
	if h, ok := obs.(interface {
		OnValidationEnd(step int, loss float64) error
	}); ok {
		cfg.OnValidationEnd = h.OnValidationEnd
	}
	if h, ok := obs.(interface {
		OnCheckpoint(step int, path string) error
	}); ok {
		cfg.OnCheckpoint = h.OnCheckpoint
	}
}

// loggers forwards a record to the loggers open (rank 0's, opened once
// the resumed step is known).
type loggers struct{ open []fabric.Logger }

func (l *loggers) Log(step int, fields []fabric.Field) error {
	for _, o := range l.open {
		if err := o.Log(step, fields); err != nil {
			return err
		}
	}
	return nil
}

package train

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	_ "github.com/weftml/weft/comm/local" // in-process ranks
	_ "github.com/weftml/weft/comm/mpi"   // Open MPI ranks, under mpirun
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/quant"
	"github.com/weftml/weft/strategy"
)

// Metrics is one line of metrics.jsonl; a non-finite loss is written null.
type Metrics struct {
	Step       int     `json:"step"`
	Loss       Float   `json:"loss"`
	LossScale  float64 `json:"loss_scale"`
	TokensPerS float64 `json:"tokens_per_s"` // units per second: tokens for gpt, images otherwise
	Skipped    bool    `json:"skipped,omitempty"`
	ValLoss    *Float  `json:"val_loss,omitempty"`
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

// Observer sees the run as it goes; Plan is called once before the first step.
type Observer interface {
	Plan(p *fabric.Plan, startStep int)
	Step(m Metrics, total int)
}

// Summary is how a run ended.
type Summary struct {
	FirstValLoss, LastValLoss float64
	Steps                     int
	Checkpoint                string
	// QuantizedBytes is the memory of the quantized weights, BF16Bytes
	// what they would take in bf16 (both 0 without a quantizer).
	QuantizedBytes, BF16Bytes int64
}

// Run trains c.Model with c's precision and strategy, resuming from
// c.Out's latest checkpoint when resume is set. Devices ranks run as
// goroutines ("local") or as this process's rank of an mpirun job
// ("mpi"); rank 0 reports.
func Run(ctx context.Context, c Config, resume bool, obs Observer) (*Summary, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	pol, scaling, err := c.policy()
	if err != nil {
		return nil, err
	}
	info, err := strategy.Lookup(c.Strategy)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return nil, fmt.Errorf("run folder: %w", err)
	}
	t, err := newTask(c)
	if err != nil {
		return nil, err
	}
	comms, err := comm.Open(c.Comm, c.Devices)
	if err != nil {
		return nil, err
	}
	sums := make([]*Summary, len(comms))
	err = comm.Each(comms, func(i int, cm comm.Communicator) (err error) {
		r := &rankRun{c: c, t: t, comm: cm, obs: obs}
		if cm.Rank() != 0 {
			r.obs = quiet{}
		}
		sums[i], err = r.run(ctx, pol, scaling, info, resume)
		return err
	})
	if err != nil {
		return nil, err
	}
	return sums[0], nil
}

// quiet is the Observer of ranks other than 0.
type quiet struct{}

func (quiet) Plan(*fabric.Plan, int) {}
func (quiet) Step(Metrics, int)      {}

// rankRun is one rank's training loop.
type rankRun struct {
	c     Config
	t     *task
	comm  comm.Communicator
	obs   Observer
	model models.Model
	f     *fabric.Fabric
}

func (r *rankRun) run(ctx context.Context, pol precision.Policy, scaling precision.LossScaling, info strategy.Info, resume bool) (*Summary, error) {
	c, lead := r.c, r.comm.Rank() == 0
	r.model = r.t.newModel()
	if c.InitFrom != "" {
		if err := loadWeights(c.InitFrom, r.model); err != nil {
			return nil, err
		}
	}
	if len(c.LoRA.Targets) > 0 {
		lora := precision.SpecFunc(func() precision.Plugin { return quant.NewLoRA(c.LoRA.Rank, c.LoRA.Alpha, c.LoRA.Targets...) })
		root, err := precision.Join(pol.Default, lora)
		if err != nil {
			return nil, err
		}
		pol.Default = root
	}
	plan, err := fabric.MakePlan(r.t.metaModel(), pol, scaling, c.Strategy, r.comm.Size())
	if err != nil {
		return nil, err
	}
	opt, err := optim.NewAdamW(nn.Parameters(r.model), optim.AdamWConfig{LR: c.LR, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	if err != nil {
		return nil, err
	}
	r.f = fabric.NewPolicy(pol, scaling)
	if r.comm.Size() > 1 || info.Sharding.OptimizerState {
		r.f.Distribute(info, r.comm)
	}
	if err := r.f.Setup(r.model, opt); err != nil {
		return nil, err
	}
	if lora, ok := loraOf(r.f.Precision()); ok { // QLoRA: only the adapters train
		opt.SetParams(lora.Params())
	}
	ckpt := checkpointer{dir: filepath.Join(c.Out, "checkpoints"), model: r.model, opt: opt, fabric: r.f, comm: r.comm}
	start := 0
	if resume {
		if start, err = ckpt.load(c); err != nil {
			return nil, err
		}
	}
	sum := &Summary{FirstValLoss: math.NaN()}
	sum.QuantizedBytes, sum.BF16Bytes = quantizedBytes(r.model)
	var enc *json.Encoder
	if lead {
		metrics, kept, err := openMetrics(filepath.Join(c.Out, "metrics.jsonl"), start)
		if err != nil {
			return nil, err
		}
		defer metrics.Close()
		enc = json.NewEncoder(metrics)
		if len(kept) > 0 && kept[0].ValLoss != nil { // a resumed run started earlier
			sum.FirstValLoss = float64(*kept[0].ValLoss)
		}
		if err := writePlan(filepath.Join(c.Out, "plan.json"), plan); err != nil {
			return nil, err
		}
	}
	r.obs.Plan(plan, start)
	for step := start; step < c.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		began := time.Now()
		b, err := r.t.batch(uint64(step)).Share(r.comm.Rank(), r.comm.Size())
		if err != nil {
			return nil, err
		}
		loss, skipped, err := trainStep(r.f, r.model, b, c.OnNaN)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
		if loss, err = r.mean(loss); err != nil {
			return nil, err
		}
		m := Metrics{Step: step, Loss: Float(loss), Skipped: skipped, LossScale: r.f.LossScale()}
		m.TokensPerS = float64(r.t.units) / time.Since(began).Seconds()
		if step == 0 || (step+1)%c.EvalEvery == 0 || step+1 == c.Steps {
			v, err := r.evaluate()
			if err != nil {
				return nil, err
			}
			fv := Float(v)
			m.ValLoss = &fv
			if step == 0 {
				sum.FirstValLoss = v
			}
			sum.LastValLoss = v
		}
		if enc != nil {
			if err := enc.Encode(m); err != nil {
				return nil, fmt.Errorf("metrics: %w", err)
			}
		}
		r.obs.Step(m, c.Steps)
		if (step+1)%c.SaveEvery == 0 || step+1 == c.Steps {
			if sum.Checkpoint, err = ckpt.save(c, step+1); err != nil {
				return nil, err
			}
		}
	}
	sum.Steps = c.Steps
	if !lead {
		return sum, nil
	}
	return sum, plotLoss(filepath.Join(c.Out, "metrics.jsonl"), filepath.Join(c.Out, "loss.png"))
}

// mean averages v over the ranks (each rank's loss is over an equal share).
func (r *rankRun) mean(v float64) (float64, error) {
	if r.comm.Size() == 1 {
		return v, nil
	}
	s, err := comm.SumFloat64(context.Background(), r.comm, v)
	return s / float64(r.comm.Size()), err
}

// evaluate returns the mean loss over EvalBatches validation batches,
// each rank taking its share, recording nothing.
func (r *rankRun) evaluate() (float64, error) {
	tp := r.f.Tape()
	tp.NoGrad = true
	defer func() { tp.NoGrad = false }()
	var total float64
	for i := range r.c.EvalBatches {
		b, err := r.t.val(i).Share(r.comm.Rank(), r.comm.Size())
		if err != nil {
			return 0, err
		}
		b.X = r.f.Input(b.X)
		logits, err := r.f.Forward(func(tp *autograd.Tape) (*autograd.Var, error) { return r.model.Forward(tp, b) })
		if err != nil {
			return 0, err
		}
		l, err := tp.CrossEntropy(logits, b.Targets)
		if err != nil {
			return 0, err
		}
		total += l.Value.Item()
	}
	return r.mean(total / float64(r.c.EvalBatches))
}

// trainStep is the five verbs of a step: input, forward, loss, backward,
// step. A non-finite loss without a loss scaler to absorb it stops the run
// with a diagnosis, or with onNaN "skip" skips the batch.
func trainStep(f *fabric.Fabric, m models.Model, b models.Batch, onNaN string) (loss float64, skipped bool, err error) {
	b.X = f.Input(b.X)
	forward := func(tp *autograd.Tape) (*autograd.Var, error) { return m.Forward(tp, b) }
	logits, err := f.Forward(forward)
	if err != nil {
		return 0, false, err
	}
	l, err := f.Tape().CrossEntropy(logits, b.Targets)
	if err != nil {
		return 0, false, err
	}
	loss = l.Value.Item()
	if (math.IsNaN(loss) || math.IsInf(loss, 0)) && !f.Plan().ScalesLoss() {
		f.Tape().Reset()
		if onNaN == "skip" {
			return loss, true, nil
		}
		return loss, false, nonFinite(f, forward, loss)
	}
	if err := f.Backward(l); err != nil {
		return 0, false, err
	}
	skipped, err = f.Step()
	return loss, skipped, err
}

// nonFinite explains a non-finite loss: the first module whose output went
// inf/NaN and what the fabric knows of the cause.
func nonFinite(f *fabric.Fabric, forward func(*autograd.Tape) (*autograd.Var, error), loss float64) error {
	where, err := f.FirstNonFinite(forward)
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("loss is %v", loss)
	if where != "" {
		msg += "; the first module whose output is not finite is " + where
	}
	if params := f.NonFiniteParams(); params != "" {
		msg += "; " + params
	}
	return fmt.Errorf("%s (the last checkpoint is untouched; on_nan: skip would skip such batches)", msg)
}

// policy builds the precision policy of the run.
func (c Config) policy() (precision.Policy, precision.LossScaling, error) {
	rules := make([]string, len(c.Modules))
	for i, m := range c.Modules {
		rules[i] = m.Match + "=" + m.Precision
	}
	return precision.ParsePolicy(c.Precision, rules, c.LossScale, precision.Options{})
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
	return writeAtomic(path, b)
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

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
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
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
}

// Run trains c.Model with c's precision, resuming from c.Out's latest
// checkpoint when resume is set.
func Run(ctx context.Context, c Config, resume bool, obs Observer) (*Summary, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	pol, scaling, err := c.policy()
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
	plan, err := fabric.MakePlan(t.model, pol, scaling, c.Strategy, c.Devices)
	if err != nil {
		return nil, err
	}
	opt, err := optim.NewAdamW(nn.Parameters(t.model), optim.AdamWConfig{LR: c.LR, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	if err != nil {
		return nil, err
	}
	f := fabric.NewPolicy(pol, scaling)
	if err := f.Setup(t.model, opt); err != nil {
		return nil, err
	}
	ckpt := checkpointer{dir: filepath.Join(c.Out, "checkpoints"), model: t.model, opt: opt, fabric: f}
	start := 0
	if resume {
		if start, err = ckpt.load(c); err != nil {
			return nil, err
		}
	}
	metrics, kept, err := openMetrics(filepath.Join(c.Out, "metrics.jsonl"), start)
	if err != nil {
		return nil, err
	}
	defer metrics.Close()
	if err := writePlan(filepath.Join(c.Out, "plan.json"), plan); err != nil {
		return nil, err
	}
	obs.Plan(plan, start)

	sum := &Summary{FirstValLoss: math.NaN()}
	if len(kept) > 0 && kept[0].ValLoss != nil { // a resumed run started earlier
		sum.FirstValLoss = float64(*kept[0].ValLoss)
	}
	enc := json.NewEncoder(metrics)
	for step := start; step < c.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		began := time.Now()
		b := t.batch(uint64(step))
		m := Metrics{Step: step}
		loss, skipped, err := trainStep(f, t.model, b, c.OnNaN)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
		m.Loss, m.Skipped = Float(loss), skipped
		m.LossScale = f.LossScale()
		m.TokensPerS = float64(t.units) / time.Since(began).Seconds()
		if step == 0 || (step+1)%c.EvalEvery == 0 || step+1 == c.Steps {
			v, err := evaluate(f, t, c.EvalBatches)
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
		if err := enc.Encode(m); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		obs.Step(m, c.Steps)
		if (step+1)%c.SaveEvery == 0 || step+1 == c.Steps {
			if sum.Checkpoint, err = ckpt.save(c, step+1); err != nil {
				return nil, err
			}
		}
	}
	sum.Steps = c.Steps
	return sum, plotLoss(filepath.Join(c.Out, "metrics.jsonl"), filepath.Join(c.Out, "loss.png"))
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
	loss = l.Value.Float64s()[0]
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

// evaluate returns the mean loss over n validation batches, recording nothing.
func evaluate(f *fabric.Fabric, t *task, n int) (float64, error) {
	tp := f.Tape()
	tp.NoGrad = true
	defer func() { tp.NoGrad = false }()
	var total float64
	for i := range n {
		b := t.val(i)
		b.X = f.Input(b.X)
		logits, err := f.Forward(func(tp *autograd.Tape) (*autograd.Var, error) { return t.model.Forward(tp, b) })
		if err != nil {
			return 0, err
		}
		l, err := tp.CrossEntropy(logits, b.Targets)
		if err != nil {
			return 0, err
		}
		total += l.Value.Float64s()[0]
	}
	return total / float64(n), nil
}

// policy builds the precision policy of the run.
func (c Config) policy() (precision.Policy, precision.LossScaling, error) {
	var scaling precision.LossScaling
	switch c.LossScale {
	case "", "auto", "dynamic":
	case "none":
		scaling = precision.NoLossScaling
	default:
		return precision.Policy{}, 0, fmt.Errorf("loss scale %q: accepted are auto and none", c.LossScale)
	}
	root, err := precision.Parse(c.Precision, precision.Options{})
	if err != nil {
		return precision.Policy{}, 0, err
	}
	pol := precision.Policy{Default: root}
	for _, m := range c.Modules {
		r, err := precision.ParseRule(m.Match+"="+m.Precision, precision.Options{})
		if err != nil {
			return precision.Policy{}, 0, err
		}
		pol.Rules = append(pol.Rules, r)
	}
	return pol, scaling, nil
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

// Package parity replays the PyTorch reference runs in weft and compares
// the results: per-step losses and loss scales, final parameters.
package parity

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
)

// Trajectories is trajectories.json: PyTorch's losses per model and run.
type Trajectories struct {
	Models map[string]struct {
		Steps int            `json:"steps"`
		Runs  map[string]Run `json:"runs"`
	} `json:"models"`
}

// Run is one reference run; a non-finite loss is null.
type Run struct {
	Losses     []*float64         `json:"losses"`
	LossScale  []*float64         `json:"loss_scale"`
	Plugin     string             `json:"plugin"`
	FinalNorms map[string]float64 `json:"final_norms"`
}

// LoadTrajectories reads dir/trajectories.json.
func LoadTrajectories(dir string) (*Trajectories, error) {
	b, err := os.ReadFile(filepath.Join(dir, "trajectories.json"))
	if err != nil {
		return nil, fmt.Errorf("reference trajectories: %w", err)
	}
	var t Trajectories
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("reference trajectories: %w", err)
	}
	return &t, nil
}

// ModelNames lists the models present, sorted.
func (t *Trajectories) ModelNames() []string { return sortedKeys(t.Models) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Hyperparameters of every reference run.
var adamW = optim.AdamWConfig{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}

// Result is what a replayed run produced.
type Result struct {
	Model      string           `json:"model"`
	Precision  string           `json:"precision"`
	Losses     []Float          `json:"losses"`
	LossScale  []Float          `json:"loss_scale,omitempty"`
	FinalNorms map[string]Float `json:"final_norms"`
	NonFinite  string           `json:"non_finite,omitempty"`
	Params     []nn.NamedParam  `json:"-"`
}

// Float encodes non-finite values as JSON null, as the reference does.
type Float float64

func (l Float) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(l)) || math.IsInf(float64(l), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(l))
}

// Train replays steps of the reference schedule of model through a Fabric
// with precision p, as the reference runs did: inputs cast and forward run
// in p's scope, cross-entropy on the (float32) logits outside it, backward
// through the loss scaler, AdamW. onStep, if not nil, sees each loss.
func Train(ref *models.Reference, model string, steps int, p precision.Plugin, onStep func(step int, loss float64)) (*Result, error) {
	m, err := models.New(model, 0)
	if err != nil {
		return nil, err
	}
	if err := ref.LoadInit(model, m); err != nil {
		return nil, err
	}
	opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
	if err != nil {
		return nil, err
	}
	f := fabric.New(p)
	if err := f.Setup(m, opt); err != nil {
		return nil, err
	}
	res := &Result{Model: model, Precision: p.Name(), FinalNorms: map[string]Float{}}
	for s := range steps {
		batch, err := ref.Batch(model, s)
		if err != nil {
			return nil, err
		}
		batch.X = f.Input(batch.X)
		logits, err := f.Forward(func(tp *autograd.Tape) (*autograd.Var, error) { return m.Forward(tp, batch) })
		if err != nil {
			return nil, err
		}
		loss, err := f.Tape().CrossEntropy(logits, batch.Targets)
		if err != nil {
			return nil, err
		}
		l := loss.Value.Float64s()[0]
		res.Losses = append(res.Losses, Float(l))
		if onStep != nil {
			onStep(s, l)
		}
		if err := f.Backward(loss); err != nil {
			return nil, err
		}
		if _, err := f.Step(); err != nil {
			return nil, err
		}
		if f.Plan().ScalesLoss() {
			res.LossScale = append(res.LossScale, Float(f.LossScale()))
		}
	}
	if err := f.NonFinite(); err != nil {
		res.NonFinite = err.Error()
	}
	res.Params = opt.Params()
	for _, p := range res.Params {
		res.FinalNorms[p.Path] = Float(p.Var.Value.Norm())
	}
	return res, nil
}

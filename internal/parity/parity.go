// Package parity replays the PyTorch reference runs in weft and compares
// the results: per-step losses, final parameter norms, final float64 weights.
package parity

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
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

// RunNames lists a model's runs, sorted.
func (t *Trajectories) RunNames(model string) []string { return sortedKeys(t.Models[model].Runs) }

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
	Model      string             `json:"model"`
	Precision  string             `json:"precision"`
	Losses     []Loss             `json:"losses"`
	FinalNorms map[string]float64 `json:"final_norms"`
	Params     []nn.NamedParam    `json:"-"`
}

// Loss is a float that encodes non-finite values as JSON null, as the reference does.
type Loss float64

func (l Loss) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(l)) || math.IsInf(float64(l), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(l))
}

// Train replays steps of the reference schedule of model with every
// parameter, input and op in dt (float64 or float32), the loss included,
// calling onStep (if not nil) with each step's loss.
func Train(ref *models.Reference, model string, steps int, dt dtype.DType, onStep func(step int, loss float64)) (*Result, error) {
	m, err := models.New(model, 0)
	if err != nil {
		return nil, err
	}
	if err := ref.LoadInit(model, m); err != nil {
		return nil, err
	}
	nn.Cast(m, dt)
	opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
	if err != nil {
		return nil, err
	}
	res := &Result{Model: model, Precision: dt.String(), FinalNorms: map[string]float64{}}
	var tp autograd.Tape
	for s := range steps {
		batch, err := ref.Batch(model, s, dt)
		if err != nil {
			return nil, err
		}
		logits, err := m.Forward(&tp, batch)
		if err != nil {
			return nil, err
		}
		loss, err := tp.CrossEntropy(logits, batch.Targets)
		if err != nil {
			return nil, err
		}
		l := loss.Value.Float64s()[0]
		res.Losses = append(res.Losses, Loss(l))
		if onStep != nil {
			onStep(s, l)
		}
		if err := tp.Backward(loss); err != nil {
			return nil, err
		}
		opt.Step()
		opt.ZeroGrad()
	}
	res.Params = opt.Params()
	for _, p := range res.Params {
		res.FinalNorms[p.Path] = p.Var.Value.Norm()
	}
	return res, nil
}

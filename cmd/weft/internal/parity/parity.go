// Package parity replays the PyTorch reference runs in weft and compares
// the results: per-step losses and loss scales, final parameters.
package parity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	_ "github.com/weftml/weft/comm/local" // the in-process backend
	_ "github.com/weftml/weft/comm/mpi"   // Open MPI, under mpirun
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/quant"
	"github.com/weftml/weft/strategy"
	"github.com/weftml/weft/train"
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
	Ranks      []RankReport     `json:"ranks,omitempty"`
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
func Train(ref *models.Reference, model string, steps int, spec precision.Spec, onStep func(step int, loss float64)) (*Result, error) {
	return TrainOn(ref, model, steps, spec, Dist{Strategy: "single", Devices: 1, Backend: "local"}, onStep)
}

// Dist places a replay on ranks: the global batch is split evenly across
// Devices ranks of Strategy, connected by the comm Backend ("local":
// goroutines in this process; "mpi": this process is one rank of mpirun's
// job, and Devices 0 takes mpirun's size).
type Dist struct {
	Strategy string
	Devices  int
	Backend  string
	Options  strategy.Options // sharding units, FSDP's reshard after forward
	// TP, if above 1, splits the model over mesh rows of TP ranks by its
	// tensor-parallel plan (models.TensorPlan); Strategy then runs over
	// the Devices/TP ranks of each mesh column, and the batch is shared
	// among those alone.
	TP int
	// Sequence adds sequence parallelism to TP (models.TensorPlan's
	// sequence-parallel plan).
	Sequence bool
	// ShardSize is hsdp's shard group (train.Placement's).
	ShardSize int
}

// RankReport is what one rank held and sent at the end of a replay.
type RankReport struct {
	Rank           int              `json:"rank"`
	ParamBytes     int64            `json:"param_bytes"`
	GradBytes      int64            `json:"grad_bytes"` // at the optimizer step
	OptimizerBytes int64            `json:"optimizer_state_bytes"`
	Sent           map[string]int64 `json:"bytes_sent"`     // by "collective/dtype", but for the tensor-parallel group's
	TensorSent     map[string]int64 `json:"tp_bytes_sent"`  // the tensor-parallel group's, by "collective/dtype"
	QKVBytes       int64            `json:"qkv_bytes"`      // the first block's qkv weight, if it has one
	Gathered       map[string]int64 `json:"gathered_bytes"` // parameter all-gathers by wire dtype
}

// TrainOn is Train on the ranks d describes, each with its own plugins
// built from spec. The reported loss is computed from every rank's logits,
// gathered, exactly as one device computes it. The Result holds the
// reports of the ranks this process ran; its losses are those of the
// lowest of them.
func TrainOn(ref *models.Reference, model string, steps int, spec precision.Spec, d Dist, onStep func(step int, loss float64)) (*Result, error) {
	src := source{
		name: model,
		model: func() (models.Model, error) {
			m, err := models.New(model, 0)
			if err != nil {
				return nil, err
			}
			return m, ref.LoadInit(model, m)
		},
		batch: func(s int) (data.Batch, error) { return ref.Batch(model, s) },
	}
	return trainOn(src, steps, spec, d, onStep)
}

// TrainGPT is TrainOn for a gpt of the size cfg gives, with no reference
// run: weights from weft's initialisation with seed 0, and batches of 8
// sequences of cfg.Context tokens drawn from a generator seeded by the
// step, so that every backend and mesh sees the same run.
func TrainGPT(cfg models.GPTConfig, steps int, spec precision.Spec, d Dist, onStep func(step int, loss float64)) (*Result, error) {
	return trainOn(seededGPT(cfg), steps, spec, d, onStep)
}

// seededGPT is a gpt of size cfg from weft's initialisation, trained on
// seededBatches.
func seededGPT(cfg models.GPTConfig) source {
	return source{
		name:  "gpt",
		model: func() (models.Model, error) { return models.NewGPT(nn.NewInit(0), cfg), nil },
		batch: seededBatches(cfg.Vocab, cfg.Context),
	}
}

// seededBatches is the batch of each step of a replay without reference
// data: 8 sequences of context random tokens from a seed per step, each
// target the next token (and a fresh one after a sequence's last).
func seededBatches(vocab, context int) func(step int) (data.Batch, error) {
	return func(s int) (data.Batch, error) {
		const seqs = 8
		rng := rand.New(rand.NewPCG(uint64(s), 0x9e3779b97f4a7c15))
		b := data.Batch{Shape: []int{seqs, context}}
		for range seqs * context {
			b.Tokens = append(b.Tokens, rng.IntN(vocab))
		}
		for j := range seqs {
			row := b.Tokens[j*context : (j+1)*context]
			b.Targets = append(append(b.Targets, row[1:]...), rng.IntN(vocab))
		}
		return b, nil
	}
}

// source is what a replay trains: the model, built alike on every rank,
// and each step's global batch.
type source struct {
	name  string // the model's, "gpt"
	model func() (models.Model, error)
	batch func(step int) (data.Batch, error)
}

func trainOn(src source, steps int, spec precision.Spec, d Dist, onStep func(step int, loss float64)) (*Result, error) {
	info, err := strategy.Lookup(d.Strategy)
	if err != nil {
		return nil, err
	}
	if d.Devices < 0 || (d.Devices == 0 && d.Backend != "mpi") {
		return nil, fmt.Errorf("devices %d: must be at least 1", d.Devices)
	}
	if d.TP < 0 {
		return nil, fmt.Errorf("tp %d: must be at least 1", d.TP)
	}
	if err := info.CheckRanks(d.Devices / max(d.TP, 1)); err != nil {
		return nil, err
	}
	comms, err := comm.Open(d.Backend, d.Devices, 0)
	if err != nil {
		return nil, err
	}
	results := make([]*Result, len(comms))
	err = comm.Each(comms, func(i int, c comm.Communicator) (err error) {
		step := onStep
		if c.Rank() != 0 {
			step = nil
		}
		results[i], err = replayRank(src, steps, spec, d, c, step)
		return err
	})
	if err != nil {
		return nil, err
	}
	res := *results[0]
	res.Ranks = nil
	for _, r := range results {
		res.Ranks = append(res.Ranks, r.Ranks...)
	}
	return &res, nil
}

// replayRank is one rank's replay, through the fabric weft train builds
// (train.NewFabric) and the training step it runs; rank 0's Result
// carries the losses.
func replayRank(src source, steps int, spec precision.Spec, d Dist, c comm.Communicator, onStep func(int, float64)) (res *Result, err error) {
	m, err := src.model()
	if err != nil {
		return nil, err
	}
	cfg := fabric.Config{
		Policy:      precision.Policy{Default: spec},
		Strategy:    d.Strategy,
		Sharding:    d.Options,
		OnNonFinite: fabric.TrainOnNonFinite, // as PyTorch does: the reference runs go on after a NaN
	}
	f, closeMesh, err := train.NewFabric(context.Background(), c, train.Placement{Model: src.name, TP: d.TP, SequenceParallel: d.Sequence, ShardSize: d.ShardSize}, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, closeMesh()) }()
	opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
	if err != nil {
		return nil, err
	}
	if err := f.Setup(m, opt); err != nil {
		return nil, err
	}
	res = &Result{Model: src.name, Precision: spec.String(), FinalNorms: map[string]Float{}}
	report := RankReport{Rank: c.Rank()}
	if err := replaySteps(f, m, src, steps, res, &report, onStep); err != nil {
		return nil, err
	}
	if err := f.NonFinite(); err != nil {
		res.NonFinite = err.Error()
	}
	rankReport(f, opt, c, &report)
	if err := f.Gather(); err != nil {
		return nil, err
	}
	if g, ok := m.(*models.GPT); ok && len(g.Blocks) > 0 {
		report.QKVBytes = weightBytes(g.Blocks[0].Attn.QKV) // this rank's share
	}
	if res.Params, err = wholeParams(f, m); err != nil {
		return nil, err
	}
	res.Ranks = []RankReport{report}
	for _, p := range res.Params {
		res.FinalNorms[p.Path] = Float(p.Var.Value.Norm())
	}
	return res, nil
}

// replaySteps trains steps of src's batches, each rank on its share as
// weft train's Loader cuts it, recording the losses (and loss scales) in
// res and the gradient and parameter bytes of the last step in report.
func replaySteps(f *fabric.Fabric, m models.Model, src source, steps int, res *Result, report *RankReport, onStep func(int, float64)) error {
	batches := f.SetupDataLoader(fabric.DatasetFunc(func(i uint64) (data.Batch, error) { return src.batch(int(i)) }))
	for s := range steps {
		b, err := batches.Next()
		if err != nil {
			return err
		}
		step, err := f.TrainStep(context.Background(), m, b)
		if err != nil {
			return err
		}
		res.Losses = append(res.Losses, Float(step.Loss))
		if onStep != nil {
			onStep(s, step.Loss)
		}
		report.ParamBytes, report.GradBytes = step.ParamBytes, step.GradBytes
		if f.Resolution().ScalesLoss() {
			res.LossScale = append(res.LossScale, Float(f.LossScale()))
		}
	}
	return nil
}

// rankReport records in report what the rank holds of optimizer state and
// what it sent and gathered.
func rankReport(f *fabric.Fabric, opt *optim.AdamW, world comm.Communicator, report *RankReport) {
	for _, p := range opt.Params() {
		if st := opt.State(p.Path); st != nil {
			report.OptimizerBytes += int64(st.ExpAvg.Bytes() + st.ExpAvgSq.Bytes())
			if st.Quantized() {
				report.OptimizerBytes += int64(st.ExpAvgScale.Bytes() + st.ExpAvgSqScale.Bytes())
			}
		}
	}
	report.Sent = sentBytes(world.Stats())
	if d := f.Rank(); d != nil && d.Comm() != world {
		for k, b := range sentBytes(d.Comm().Stats()) {
			report.Sent[k] += b
		}
	}
	if l := f.Layout(); l != nil {
		report.TensorSent = sentBytes(l.Group.Stats())
	}
	if f.Rank() != nil {
		report.Gathered = map[string]int64{}
		for dt, b := range f.Rank().Gathered() {
			report.Gathered[dt.String()] += b
		}
	}
}

// wholeParams are m's parameters as one device holds them: a mesh row's
// split tensors gathered whole.
func wholeParams(f *fabric.Fabric, m models.Model) ([]nn.NamedParam, error) {
	params := nn.Parameters(m)
	if f.Layout() == nil {
		return params, nil
	}
	whole, err := f.Layout().Whole(context.Background())
	if err != nil {
		return nil, err
	}
	for i, p := range params {
		if w, ok := whole[p.Var]; ok {
			params[i].Var = &autograd.Var{Value: w}
		}
	}
	return params, nil
}

// weightBytes is what l's weight holds: its codes once a quantizing
// plugin has replaced it (the Linear then has no Weight), else its value.
func weightBytes(l *nn.Linear) int64 {
	if q, ok := quant.WeightOf(l); ok {
		return int64(q.Bytes())
	}
	if l.Weight == nil {
		return 0
	}
	return int64(l.Weight.Value.Bytes())
}

// sentBytes flattens comm.Stats into "collective/dtype" keys.
func sentBytes(s comm.Stats) map[string]int64 {
	out := map[string]int64{}
	for k, b := range s.Bytes {
		dt := "bytes"
		if k.DType != dtype.Invalid {
			dt = k.DType.String()
		}
		out[k.Collective.String()+"/"+dt] += b
	}
	return out
}

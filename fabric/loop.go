package fabric

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// Model is what the training loop trains: Forward maps a batch to logits
// [rows, classes] whose rows line up with the batch's Targets.
type Model interface {
	nn.Module
	Forward(tp *autograd.Tape, b data.Batch) (*autograd.Var, error)
}

// OnNonFinite is what a training step does with an inf/NaN loss that no
// loss scaler absorbs.
type OnNonFinite int

const (
	// StopOnNonFinite fails the step, before backward touches the weights,
	// naming the first module whose output went non-finite and the cause.
	StopOnNonFinite OnNonFinite = iota
	// SkipNonFinite skips the batch: no backward, no optimizer step.
	SkipNonFinite
	// TrainOnNonFinite runs backward and the step as PyTorch does (the
	// weights then hold NaN); replays of PyTorch's runs use it.
	TrainOnNonFinite
)

// StepResult is what one training step did.
type StepResult struct {
	// Loss is the cross-entropy over the whole global batch, computed as
	// one device computes it (every rank's logits, gathered in rank order).
	Loss float64
	// Skipped is true when the optimizer step was skipped: by the loss
	// scaler (a non-finite gradient) or by SkipNonFinite.
	Skipped bool
	// ParamBytes and GradBytes are what this rank held for parameters and
	// gradients at the optimizer step.
	ParamBytes, GradBytes int64
}

// TrainStep is the training step every weft command runs: this rank takes
// its share of the global batch and trains on it as TrainShare does. Every
// rank must call it with the same global batch.
func (f *Fabric) TrainStep(ctx context.Context, m Model, global data.Batch) (StepResult, error) {
	b, made, err := f.share(global)
	if err != nil {
		return StepResult{}, err
	}
	defer tensor.Free(made)
	return f.TrainShare(ctx, m, b)
}

// TrainShare is the training step on this rank's share of a global batch
// (a Loader's): it casts the input, runs the forward pass in the
// precision's scope, computes the cross-entropy of the logits outside it,
// runs backward through the loss scaler (syncing gradients across ranks)
// and steps the optimizer. Every rank must call it, each with its share
// of the same global batch.
func (f *Fabric) TrainShare(ctx context.Context, m Model, share data.Batch) (StepResult, error) {
	if f.model == nil || f.opt == nil {
		return StepResult{}, fmt.Errorf("fabric: a training step before SetupModule and SetupOptimizers")
	}
	b, made := f.cast(share)
	defer tensor.Free(made)
	forward := func(tp *autograd.Tape) (*autograd.Var, error) { return m.Forward(tp, b) }
	logits, err := f.forward(ctx, forward)
	if err != nil {
		return StepResult{}, err
	}
	loss, err := f.tape.CrossEntropy(logits, b.Targets)
	if err != nil {
		return StepResult{}, err
	}
	res := StepResult{}
	if res.Loss, err = f.globalLoss(ctx, logits.Value, loss.Value, b.Targets); err != nil {
		return StepResult{}, err
	}
	if !isFinite(res.Loss) && !f.plan.ScalesLoss() && f.OnNonFinite != TrainOnNonFinite {
		f.tape.Reset()
		if f.OnNonFinite == SkipNonFinite {
			res.Skipped = true
			return res, nil
		}
		return res, f.explainNonFinite(ctx, forward, res.Loss)
	}
	if err := f.backward(ctx, loss); err != nil {
		return StepResult{}, err
	}
	res.ParamBytes, res.GradBytes = f.RankBytes()
	if res.Skipped, err = f.step(ctx); err != nil {
		return StepResult{}, err
	}
	return res, nil
}

// EvalLoss is the cross-entropy of the model over the global batch, as
// TrainStep computes it, recording nothing for backward.
func (f *Fabric) EvalLoss(ctx context.Context, m Model, global data.Batch) (float64, error) {
	b, made, err := f.share(global)
	if err != nil {
		return 0, err
	}
	defer tensor.Free(made)
	return f.EvalShare(ctx, m, b)
}

// EvalShare is EvalLoss on this rank's share of the global batch.
func (f *Fabric) EvalShare(ctx context.Context, m Model, share data.Batch) (float64, error) {
	b, made := f.cast(share)
	defer tensor.Free(made)
	f.tape.NoGrad = true
	defer func() { f.tape.NoGrad = false; f.tape.Reset() }()
	logits, err := f.forward(ctx, func(tp *autograd.Tape) (*autograd.Var, error) { return m.Forward(tp, b) })
	if err != nil {
		return 0, err
	}
	loss, err := f.tape.CrossEntropy(logits, b.Targets)
	if err != nil {
		return 0, err
	}
	return f.globalLoss(ctx, logits.Value, loss.Value, b.Targets)
}

// share is this rank's part of the global batch and the tensor made for
// it (nil on one rank), for the caller to free.
func (f *Fabric) share(global data.Batch) (data.Batch, *tensor.Tensor, error) {
	n, r := f.ranks()
	if n == 1 {
		return global, nil, nil
	}
	b, err := global.Share(r, n)
	if err != nil {
		return data.Batch{}, nil, fmt.Errorf("fabric: %w", err)
	}
	return b, b.X, nil
}

// ranks is the number of ranks and this one's (1 and 0 on one device).
func (f *Fabric) ranks() (n, r int) {
	switch {
	case f.dist != nil:
		return f.dist.Comm().Size(), f.dist.Comm().Rank()
	case f.distCfg != nil:
		return f.distCfg.comm.Size(), f.distCfg.comm.Rank()
	}
	return 1, 0
}

// cast is b with its input cast to the precision's input dtype, and the
// tensor made for it (nil if none), to free after the step.
func (f *Fabric) cast(b data.Batch) (data.Batch, *tensor.Tensor) {
	if x := f.Input(b.X); x != b.X {
		b.X = x
		return b, x
	}
	return b, nil
}

// globalLoss is the loss one device would compute over the global batch:
// every rank's logits and targets gathered in rank order (the batch's row
// order) and reduced as one batch; on one rank, this rank's loss.
func (f *Fabric) globalLoss(ctx context.Context, logits, local *tensor.Tensor, targets []int) (float64, error) {
	if f.dist == nil || f.dist.Comm().Size() == 1 {
		return local.Item(), nil
	}
	c := f.dist.Comm()
	full := tensor.New(logits.DType(), c.Size()*logits.Dim(0), logits.Dim(-1))
	defer tensor.Free(full)
	if err := f.dist.AllGather(ctx, logits.Data(), full.Data()); err != nil {
		return 0, fmt.Errorf("fabric: gathering logits: %w", err)
	}
	all, err := f.gatherTargets(ctx, targets)
	if err != nil {
		return 0, err
	}
	l, err := tensor.CrossEntropy(full, all)
	if err != nil {
		return 0, err
	}
	defer tensor.Free(l)
	return l.Item(), nil
}

// gatherTargets is every rank's targets in rank order.
func (f *Fabric) gatherTargets(ctx context.Context, targets []int) ([]int, error) {
	send := make([]byte, 4*len(targets))
	for i, t := range targets {
		binary.LittleEndian.PutUint32(send[4*i:], uint32(t))
	}
	recv := make([]byte, len(send)*f.dist.Comm().Size())
	if err := f.dist.AllGather(ctx, send, recv); err != nil {
		return nil, fmt.Errorf("fabric: gathering targets: %w", err)
	}
	all := make([]int, len(recv)/4)
	for i := range all {
		all[i] = int(int32(binary.LittleEndian.Uint32(recv[4*i:])))
	}
	return all, nil
}

// explainNonFinite is the error of a non-finite loss: the first module
// whose output went inf/NaN and what the fabric knows of the cause.
func (f *Fabric) explainNonFinite(ctx context.Context, forward func(*autograd.Tape) (*autograd.Var, error), loss float64) error {
	where, err := f.firstNonFinite(ctx, forward)
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

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

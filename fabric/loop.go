package fabric

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"

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
	// GradNorm is the global L2 norm of the gradients before clipping,
	// with Config.ClipNorm; 0 without, or when the step was skipped.
	GradNorm float64
	// ParamBytes and GradBytes are what this rank held for parameters and
	// gradients at the optimizer step.
	ParamBytes, GradBytes int64
}

// TrainStep is the training step every weft command runs, on this rank's
// share of a global batch (a Loader's; on one device the whole batch): it
// casts the input, runs the forward pass in the precision's scope,
// computes the cross-entropy of the logits outside it, runs backward
// through the loss scaler (syncing gradients across ranks), clips the
// gradients to Config.ClipValue or ClipNorm, if set, steps the optimizer and tells the
// Config.OnStepEnd; with Config.Accumulation, it does all before the
// clipping once per micro-batch of the share. Every rank must call it,
// each with its share of the same global batch.
func (f *Fabric) TrainStep(ctx context.Context, m Model, share data.Batch) (StepResult, error) {
	if err := f.checkCall("TrainStep", m, share); err != nil {
		return StepResult{}, err
	}
	step := f.steps
	res, err := f.trainStep(ctx, m, share)
	if err != nil {
		return StepResult{}, err
	}
	if err := f.cfg.OnStepEnd(step, res); err != nil {
		return res, fmt.Errorf("fabric: OnStepEnd: %w", err)
	}
	return res, nil
}

func (f *Fabric) trainStep(ctx context.Context, m Model, share data.Batch) (StepResult, error) {
	n := max(f.cfg.Accumulation.MicroBatches, 1)
	res := StepResult{}
	for k := range n {
		b, err := f.cfg.Accumulation.microBatch(share, k)
		if err != nil {
			return StepResult{}, err
		}
		loss, skip, err := f.microStep(ctx, m, b, k, n)
		if n > 1 {
			tensor.Free(b.X)
		}
		if err != nil {
			return StepResult{}, err
		}
		res.Loss += loss / float64(n)
		if skip {
			res.Loss, res.Skipped = loss, true
			f.steps++  // a skipped step is a step, as the loss scaler's are
			if k > 0 { // the earlier micro-batches' gradients
				return res, f.dropGrads(ctx)
			}
			return res, nil
		}
	}
	if err := f.clip(&res); err != nil {
		return StepResult{}, err
	}
	res.ParamBytes, res.GradBytes = f.rankBytes()
	skipped, err := f.step(ctx)
	if err != nil {
		return StepResult{}, err
	}
	if skipped {
		res.Skipped, res.GradNorm = true, 0
	}
	return res, nil
}

// microStep runs forward and backward on micro-batch k of n of this
// rank's share, the whole share when n is 1, and returns its global loss;
// skip reports a non-finite loss that SkipNonFinite skips, before
// backward.
func (f *Fabric) microStep(ctx context.Context, m Model, micro data.Batch, k, n int) (loss float64, skip bool, err error) {
	b, made := f.cast(micro)
	defer tensor.Free(made)
	forward := func(tp *autograd.Tape) (*autograd.Var, error) { return m.Forward(tp, b) }
	logits, err := f.forward(ctx, forward)
	if err != nil {
		return 0, false, err
	}
	local, err := f.tape.CrossEntropy(logits, b.Targets)
	if err != nil {
		return 0, false, err
	}
	if loss, err = f.globalLoss(ctx, logits.Value, local.Value, b.Targets); err != nil {
		return 0, false, err
	}
	if !isFinite(loss) && !f.plan.ScalesLoss() && f.cfg.OnNonFinite != TrainOnNonFinite {
		f.tape.Reset()
		return loss, true, f.nonFiniteLoss(ctx, forward, loss)
	}
	if n > 1 {
		local = f.tape.Scale(local, 1/float64(n))
	}
	return loss, false, f.NoBackwardSync(f.skipsSync(k, n), func() error { return f.backward(ctx, local) })
}

// dropGrads drops the gradients a skipped step accumulated, as a step
// does after updating.
func (f *Fabric) dropGrads(ctx context.Context) error {
	f.opt.ZeroGrad()
	if f.dist == nil {
		return nil
	}
	return f.dist.AfterStep(ctx)
}

// EvalLoss is a validation pass: the mean over batches of the
// cross-entropy of the model on each, as TrainStep computes it (in
// Config.EvalPrecision, if set), recording nothing for backward; it tells
// Config.OnValidationEnd. Each
// batch is this rank's share of a global batch (a Loader's), and every
// rank must call it with its shares of the same global batches.
func (f *Fabric) EvalLoss(ctx context.Context, m Model, batches ...data.Batch) (float64, error) {
	if len(batches) == 0 {
		return 0, errors.New("fabric: EvalLoss: no batches to evaluate on")
	}
	var total float64
	for _, b := range batches {
		l, err := f.evalLoss(ctx, m, b)
		if err != nil {
			return 0, err
		}
		total += l
	}
	loss := total / float64(len(batches))
	if err := f.cfg.OnValidationEnd(f.steps-1, loss); err != nil {
		return loss, fmt.Errorf("fabric: OnValidationEnd: %w", err)
	}
	return loss, nil
}

func (f *Fabric) evalLoss(ctx context.Context, m Model, share data.Batch) (float64, error) {
	if err := f.checkCall("EvalLoss", m, share); err != nil {
		return 0, err
	}
	defer f.eval.enter(f)()
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

// checkCall is nil if call (TrainStep, EvalLoss, ...) may run m on b:
// after Setup, on the model set up, with a batch whose parts agree. What
// the batch must hold for m in particular (its width, its context) m's
// Forward checks.
func (f *Fabric) checkCall(call string, m Model, b data.Batch) error {
	if err := f.ready(call); err != nil {
		return err
	}
	if isNil(m) {
		return fmt.Errorf("fabric: %s: the model is nil", call)
	}
	if !sameModule(m, f.model) {
		return fmt.Errorf("fabric: %s of a model other than the one given to Setup (which the precision converted and the optimizer steps)", call)
	}
	if err := checkBatch(b); err != nil {
		return fmt.Errorf("fabric: %s: %w", call, err)
	}
	return nil
}

// sameModule reports whether a and b are the same module value.
// (A module of a type that == cannot compare is the same if of the same type.)
func sameModule(a, b nn.Module) bool {
	t := reflect.TypeOf(a)
	if t != reflect.TypeOf(b) {
		return false
	}
	return !t.Comparable() || a == b
}

// checkBatch is nil if b's parts agree: an input (X, or Tokens shaped
// [B, T]), and targets.
func checkBatch(b data.Batch) error {
	switch {
	case b.X == nil && b.Tokens == nil:
		return errors.New("the batch is empty: it has neither X (features, images) nor Tokens")
	case len(b.Targets) == 0:
		return errors.New("the batch has no targets (one per row of logits)")
	case b.X != nil && (len(b.X.Shape()) == 0 || b.X.Dim(0) == 0):
		return fmt.Errorf("the batch's X has shape %v; want [B, ...] with B at least 1", b.X.Shape())
	case b.Tokens == nil && b.Shape == nil:
		return nil
	case len(b.Shape) != 2 || b.Shape[0] < 1 || b.Shape[1] < 1 || b.Shape[0]*b.Shape[1] != len(b.Tokens):
		return fmt.Errorf("the batch has %d tokens and Shape %v; want Shape [B, T], both at least 1, with B·T tokens", len(b.Tokens), b.Shape)
	}
	return nil
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
// each rank's rows' log-probabilities of their targets gathered in rank
// order (the batch's row order) and reduced as one batch, bit for bit one
// device's; on one rank, this rank's loss. A row sends one number, not
// its vocabulary's logits.
func (f *Fabric) globalLoss(ctx context.Context, logits, local *tensor.Tensor, targets []int) (float64, error) {
	if f.dist == nil || f.dist.Comm().Size() == 1 {
		return local.Item(), nil
	}
	logp, err := tensor.TargetLogProbs(logits, targets)
	if err != nil {
		return 0, err
	}
	defer tensor.Free(logp)
	all, err := f.AllGather(ctx, logp)
	if err != nil {
		return 0, fmt.Errorf("gathering log-probabilities: %w", err)
	}
	defer tensor.Free(all)
	l := tensor.NLLMean(all, local.DType())
	defer tensor.Free(l)
	return l.Item(), nil
}

// nonFiniteLoss is nil if SkipNonFinite skips the batch of a non-finite
// loss, else the error that stops the step: StopOnNonFinite's, or
// SkipNonFinite's when the parameters themselves are inf/NaN (no batch
// can train them; skipping would only run on to a NaN checkpoint).
func (f *Fabric) nonFiniteLoss(ctx context.Context, forward func(*autograd.Tape) (*autograd.Var, error), loss float64) error {
	if f.cfg.OnNonFinite == SkipNonFinite {
		if _, bad, err := f.paramsNonFinite(ctx); err != nil || !bad {
			return err
		}
	}
	return f.explainNonFinite(ctx, forward, loss)
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
		return fmt.Errorf("%s; %s (the last checkpoint is untouched; skipping batches cannot mend the parameters)", msg, params)
	}
	return fmt.Errorf("%s (the last checkpoint is untouched; --on-nan skip would skip such batches)", msg)
}

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

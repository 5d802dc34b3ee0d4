// Package fabric is what a training loop is written against (Lightning
// Fabric's role): it sets up a model and optimizer for a precision plugin,
// runs the forward pass inside the plugin's scope, scales the loss for
// backward, and steps the optimizer through the loss scaler.
package fabric

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/optim/lowbit"
	"github.com/weftml/weft/parallel"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/strategy"
	"github.com/weftml/weft/tensor"
)

// Fabric drives one model and its optimizer.
type Fabric struct {
	plugin  precision.Plugin // the root scope's: Config.Precision, or built by Setup
	policy  precision.Policy
	plan    *precision.Resolution // set by Setup
	scopes  *precision.Scopes
	eval    *forwardPrecision // Config.EvalPrecision's, set by Setup
	scaler  precision.Scaler
	dist    *strategy.Rank   // nil on one device
	tensors *parallel.Layout // Config.TensorPlan's, set by Setup
	mesh    meshAgreement    // over Config.Comm, on a Mesh
	spy     *nanSpy          // set while FirstNonFinite looks for a blow-up
	distCfg *distConfig
	meter   *meter // a plan's pass on meta tensors: cuts it at units
	tape    autograd.Tape
	model   nn.Module
	opt     optim.Optimizer
	// stateDType is the optimizer-state dtype the precision set (Invalid:
	// each parameter's own).
	stateDType dtype.DType
	// stateFormat is the low-bit optimizer-state format the precision
	// set (nil: moments in stateDType).
	stateFormat *lowbit.Format
	steps       int // steps taken, skipped ones too
	// nonFinite is the first non-finite loss seen, with its diagnosis.
	nonFinite error
	// misuse is a failed Setup: the precision's plugins are bound to the
	// model it was given, so every later call reports it.
	misuse error
	cfg    Config // New's
}

// distConfig is the strategy a fabric runs and the communicator it runs
// over (New's place decides them; Setup makes the rank).
type distConfig struct {
	info strategy.Info
	comm comm.Communicator
}

// comms asks each parameter's plugin how a strategy moves it: its FSDP
// wire format (gatherFormat), whether it computes with the gathered codes
// as they are, and the dtype its gradient is reduced in.
func comms(plan *precision.Resolution) strategy.Comms {
	type param struct {
		scope precision.Scope
		p     nn.Param
	}
	params := map[string]param{}
	for _, s := range plan.Scopes {
		for _, p := range s.Module.Params() {
			params[nn.Join(s.Path, p.Name)] = param{s, p}
		}
	}
	tied := tiedParams(plan)
	return strategy.Comms{
		Format: func(path string) (dtype.DType, float32, bool) {
			q := params[path]
			return gatherFormat(q.scope, q.p, tied)
		},
		Use: func(path string, codes, chunk *tensor.Tensor, scale float32) bool {
			return precision.UseGathered(params[path].scope.Plugin, path, codes, chunk, scale)
		},
		Codec: func(path string, gemms strategy.GEMMs) comm.Codec {
			q := params[path]
			return gatherCodec(q.scope, q.p, gemms)
		},
		Drop:   func(path string) { precision.DropGathered(params[path].scope.Plugin, path) },
		Reduce: func(path string) (dtype.DType, bool) { return precision.ReduceDType(params[path].scope.Plugin, path) },
	}
}

// gatherFormat is the wire format FSDP gathers parameter p of s's module
// in (precision.Scope.GatherFormat), but for a parameter the model reads
// outside its module too (tied, a gpt's token embedding as its head),
// whose other readers may compute with it exactly: that one travels as
// its plugin asks, else in its storage dtype.
func gatherFormat(s precision.Scope, p nn.Param, tied map[*autograd.Var]bool) (dtype.DType, float32, bool) {
	if tied[p.Var] {
		return precision.GatherFormat(s.Plugin, nn.Join(s.Path, p.Name))
	}
	return s.GatherFormat(p.Name)
}

// gatherCodec is the codec the plugin of s offers for FSDP's gathers of
// p for gemms, or nil (see precision.GatherCoder).
func gatherCodec(s precision.Scope, p nn.Param, gemms strategy.GEMMs) comm.Codec {
	return precision.GatherCodec(s.Plugin, nn.Join(s.Path, p.Name), gemms&strategy.ForwardGEMMs != 0, gemms&strategy.BackwardGEMMs != 0)
}

// gathersSome is check, if not nil, then a check that refuses a precision
// asking for parameter all-gathers in a dtype of its own (param_dtype)
// under strategy st if st gathers no parameters: it would change nothing.
func gathersSome(st strategy.Info, check func(*precision.Resolution) error) func(*precision.Resolution) error {
	return func(res *precision.Resolution) error {
		if check != nil {
			if err := check(res); err != nil {
				return err
			}
		}
		for _, s := range res.Scopes {
			for _, q := range s.Module.Params() {
				if dt, scale, ok := precision.GatherFormat(s.Plugin, nn.Join(s.Path, q.Name)); ok && scale == 0 && !st.Sharding.Parameters {
					return fmt.Errorf("precision %s gathers parameters in %s (param_dtype), but strategy %s gathers none; use fsdp or hsdp, or drop param_dtype", s.Plugin.Name(), dt, st.Name)
				}
			}
		}
		return nil
	}
}

// tiedParams are the parameters of the modules plan's model reads outside
// themselves (strategy.TiedModel).
func tiedParams(plan *precision.Resolution) map[*autograd.Var]bool {
	tied := map[*autograd.Var]bool{}
	if t, ok := plan.Scopes[0].Module.(strategy.TiedModel); ok {
		for _, m := range t.Tied() {
			for _, p := range nn.Parameters(m) {
				tied[p.Var] = true
			}
		}
	}
	return tied
}

// rankBytes is what this rank holds now for parameters and gradients.
func (f *Fabric) rankBytes() (params, grads int64) {
	if f.dist != nil {
		return f.dist.Bytes()
	}
	if f.opt == nil {
		return 0, 0
	}
	for _, p := range f.opt.Params() {
		params += int64(p.Var.Value.Bytes())
		if p.Var.Grad != nil {
			grads += int64(p.Var.Grad.Bytes())
		}
	}
	return params, grads
}

// Gather makes every parameter whole on this rank again (after ZeRO-3
// training, before evaluating or saving the full model).
func (f *Fabric) Gather() error {
	if f.dist == nil {
		return nil
	}
	return f.dist.GatherAll(context.Background())
}

// Rank returns the strategy's rank, nil on one device.
func (f *Fabric) Rank() *strategy.Rank { return f.dist }

// Resolution returns the resolved per-module precision (nil before Setup).
func (f *Fabric) Resolution() *precision.Resolution { return f.plan }

// Layout is how Config.TensorPlan split the model across the mesh's row
// (nil without a Mesh, and before Setup).
func (f *Fabric) Layout() *parallel.Layout { return f.tensors }

// Precision returns the root scope's plugin (before Setup: Config.Precision,
// nil for a Policy).
func (f *Fabric) Precision() precision.Plugin { return f.plugin }

// Setup is SetupModule then SetupOptimizers; it checks that opt can hold
// the precision's optimizer-state dtype before the model is converted.
func (f *Fabric) Setup(m nn.Module, opt optim.Optimizer) error {
	if isNil(opt) {
		return errors.New("fabric: Setup: the optimizer is nil; pass one over the model's parameters")
	}
	if err := f.setupModule(m, func(res *precision.Resolution) error { return f.checkOptimizerState(res, opt) }); err != nil {
		return err
	}
	return f.SetupOptimizers(opt)
}

// SetupModule converts the model for the precision (cast, layer
// replacement), splits it across the mesh's row by Config.TensorPlan and
// hands it to the strategy, which keeps this rank's share (under fsdp its
// chunks, drawn from the initialisers for a model built by InitModule).
// Its precision errors are MakePlan's, word for word; what the conversion
// left undone is in Resolution().Warnings.
func (f *Fabric) SetupModule(m nn.Module) error { return f.setupModule(m, nil) }

func (f *Fabric) setupModule(m nn.Module, check func(*precision.Resolution) error) error {
	switch {
	case f.misuse != nil:
		return f.misuse
	case isNil(m):
		return errors.New("fabric: Setup: the model is nil")
	case f.model != nil:
		return errors.New("fabric: Setup called twice: a Fabric sets up one model; make a new Fabric for another")
	}
	if f.cfg.Mesh != nil {
		l, err := parallel.Parallelize(m, f.cfg.Mesh.Tensor, f.cfg.TensorPlan)
		if err != nil { // m is as it was
			return fmt.Errorf("fabric: setup: %w", err)
		}
		f.tensors = l
	}
	if err := f.convert(m, check); err != nil {
		// The precision's plugins are bound to m now: a retry would
		// blame them, not this error.
		f.misuse = fmt.Errorf("fabric: Setup failed before (%w); make a new Fabric to try again", err)
		return err
	}
	return nil
}

// convert is setupModule past its checks: the precision's conversion of
// m, its materialisation and its hand-over to the strategy.
func (f *Fabric) convert(m nn.Module, check func(*precision.Resolution) error) error {
	if f.distCfg != nil {
		check = gathersSome(f.distCfg.info, check)
	}
	plan, err := prepare(m, f.policy, f.cfg.LossScaling, check)
	if err != nil {
		return err
	}
	if err := materialize(m, f.distCfg == nil || !f.distCfg.info.Sharding.Parameters); err != nil {
		return err
	}
	if f.tape.Recompute, err = recomputed(m, f.cfg.ActivationCheckpointing); err != nil {
		return err
	}
	f.plugin, f.plan, f.scaler, f.scopes = plan.Root, plan, plan.Scaler, plan.Scoper()
	_, rank := f.ranks()
	plan.UseSeed(f.cfg.Seed, rank)
	if f.eval, err = evalPrecision(m, f.cfg.EvalPrecision, plan); err != nil {
		return err
	}
	if f.distCfg != nil {
		opts := f.cfg.Sharding
		opts.StateBlock = stateBlock(precision.OptimizerFormat(plan.Root)) // chunks of whole low-bit state blocks
		if f.dist, err = strategy.NewRank(f.distCfg.info, f.distCfg.comm, m, comms(plan), opts); err != nil {
			return fmt.Errorf("fabric: setup: %w", err)
		}
		plan.AgreeOver(f.dist)
	}
	if f.tensors != nil {
		plan.AgreeOver(f.mesh)
	}
	f.model = m
	return nil
}

// SetupOptimizers gives opt, which holds the model's parameters (they
// keep their identity), the precision's optimizer-state dtype and, under
// a strategy that shards optimizer state, this rank's chunks to update.
func (f *Fabric) SetupOptimizers(opt optim.Optimizer) error {
	switch {
	case f.model == nil:
		return errors.New("fabric: SetupOptimizers before SetupModule")
	case isNil(opt):
		return errors.New("fabric: SetupOptimizers: the optimizer is nil; pass one over the model's parameters")
	case f.opt != nil:
		return errors.New("fabric: SetupOptimizers called twice: the fabric steps one optimizer")
	}
	if err := f.checkOptimizerState(f.plan, opt); err != nil {
		return err
	}
	if dt, sets := precision.OptimizerStateDType(f.plan.Root); sets {
		opt.(stateDTyper).SetStateDType(dt)
		f.stateDType = dt
	}
	if fm := precision.OptimizerFormat(f.plan.Root); fm != nil {
		opt.(stateFormatter).SetStateFormat(fm)
		f.stateFormat = fm
	}
	if precision.RoundsStochastically(f.plan.Root) {
		opt.(stochasticRounder).SetStochasticRound(&optim.StochasticRound{Seed: f.cfg.Seed, Origin: f.origins()})
	}
	if f.dist != nil {
		opt.SetParams(f.dist.OptimizerParams())
	}
	if f.stateFormat != nil && f.shardedOptimizer() { // no low-bit state for a chunk's padding
		for i, p := range f.dist.OptimizerParams() {
			if _, n, chunk := f.dist.Part(i); n < chunk {
				opt.(stateFormatter).SetStateElems(p.Path, n)
			}
		}
	}
	f.opt = opt
	return nil
}

// origins places each parameter the optimizer updates in the model's
// parameters, its chunk in the parameter, and a tensor-parallel share in
// the whole, for stochastic rounding.
func (f *Fabric) origins() func(path string) optim.Origin {
	at := map[string]optim.Origin{}
	for i, p := range nn.Parameters(f.model) {
		o := optim.Origin{Index: i}
		if f.dist != nil {
			o.Offset = f.dist.OptimizerOffset(i)
		}
		if f.tensors != nil {
			for _, r := range f.tensors.Runs(p.Var) {
				o.Runs = append(o.Runs, tensor.WordRun{At: uint64(r.At), Word: uint64(r.Whole)})
			}
		}
		at[p.Path] = o
	}
	return func(path string) optim.Origin { return at[path] }
}

// isNil reports whether v is nil or holds a nil pointer (a nil *AdamW
// passed as an Optimizer), which no method can be called on.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// ready is nil once Setup (or SetupModule and SetupOptimizers) has run,
// else an error naming call.
func (f *Fabric) ready(call string) error {
	switch {
	case f.misuse != nil:
		return f.misuse
	case f.model == nil:
		return fmt.Errorf("fabric: %s before Setup: call Setup(model, optimizer) first", call)
	case f.opt == nil:
		return fmt.Errorf("fabric: %s before SetupOptimizers: SetupModule has run, the optimizer is missing", call)
	}
	return nil
}

// stateDTyper is an optimizer whose state dtype the precision can set.
type stateDTyper interface{ SetStateDType(dtype.DType) }

// stateFormatter is an optimizer that can keep its state in a low-bit
// format, and for a parameter's first elements only (a sharded chunk's,
// before its padding).
type stateFormatter interface {
	SetStateFormat(*lowbit.Format)
	SetStateElems(path string, n int)
}

// stochasticRounder is an optimizer that can round bfloat16 parameters
// stochastically.
type stochasticRounder interface {
	SetStochasticRound(*optim.StochasticRound)
}

// checkOptimizerState is an error if opt cannot hold the optimizer state
// res's precision sets (a dtype, or low-bit blocks) or round stochastically.
// Under tensor parallelism a rank's share of a split parameter is a
// parameter of its own to the optimizer, as a DTensor's local shard is to
// torchao's and bitsandbytes' optimizers: its blocks are those of the
// share.
func (f *Fabric) checkOptimizerState(res *precision.Resolution, opt optim.Optimizer) error {
	name := res.Root.Name()
	if _, sets := precision.OptimizerStateDType(res.Root); sets {
		if _, ok := opt.(stateDTyper); !ok {
			return fmt.Errorf("fabric: setup: precision %s sets the optimizer-state dtype, which %T cannot hold", name, opt)
		}
	}
	if precision.RoundsStochastically(res.Root) {
		if _, ok := opt.(stochasticRounder); !ok {
			return fmt.Errorf("fabric: setup: precision %s rounds parameters stochastically, which %T cannot do", name, opt)
		}
	}
	if fm := precision.OptimizerFormat(res.Root); fm != nil {
		if _, ok := opt.(stateFormatter); !ok {
			return fmt.Errorf("fabric: setup: precision %s keeps %s, which %T cannot hold", name, fm.Moments, opt)
		}
	}
	return nil
}

// Tape is the tape ops are recorded on; compute the loss on it, outside
// Forward, as a Lightning user does.
func (f *Fabric) Tape() *autograd.Tape { return &f.tape }

// Input casts a floating input tensor to the precision's input dtype;
// integer tensors and plugins without an input cast leave it unchanged.
func (f *Fabric) Input(t *tensor.Tensor) *tensor.Tensor {
	if dt, ok := precision.InputDType(f.plugin); ok && t != nil && t.DType().IsFloat() {
		return t.To(dt)
	}
	return t
}

// Forward runs fn inside the precision's scope (autocast) and casts its
// floating output to the precision's output dtype. The scope is closed on
// return, on error and on panic.
func (f *Fabric) Forward(fn func(tp *autograd.Tape) (*autograd.Var, error)) (*autograd.Var, error) {
	return f.forward(context.Background(), fn)
}

func (f *Fabric) forward(ctx context.Context, fn func(tp *autograd.Tape) (*autograd.Var, error)) (*autograd.Var, error) {
	if fn == nil {
		return nil, errors.New("fabric: Forward: the forward function is nil")
	}
	run := func() (out *autograd.Var, err error) {
		err = f.guardTensors(ctx, func() (err error) { out, err = f.scoped(ctx, fn); return err })
		return out, err
	}
	var out *autograd.Var
	var err error
	if f.dist != nil {
		out, err = f.dist.Pass(ctx, run)
	} else {
		out, err = run()
	}
	if err != nil {
		return nil, err
	}
	if out == nil {
		return nil, errors.New("fabric: the forward function returned no output")
	}
	if dt, ok := precision.OutputDType(f.plugin); ok && out.Value.DType().IsFloat() {
		out = f.tape.Cast(out, dt)
	}
	return out, nil
}

// scoped runs fn with the tape's Scoper made of the precision's scopes,
// the non-finite spy's, if looking, the tensor-parallel layout's and the
// strategy's, each wrapping the one before.
func (f *Fabric) scoped(ctx context.Context, fn func(tp *autograd.Tape) (*autograd.Var, error)) (*autograd.Var, error) {
	defer precision.Enter(f.plugin, &f.tape).Exit()
	if f.scopes != nil {
		var s autograd.Scoper = f.scopes
		if f.spy != nil {
			f.spy.inner, s = f.scopes, f.spy
		}
		if f.tensors != nil { // sequence parallelism, inside the strategy's units
			s = f.tensors.Scoper(s)
		}
		if f.dist != nil {
			s = f.dist.Scoper(ctx, s)
		}
		if f.meter != nil {
			f.meter.inner, s = s, f.meter
		}
		f.tape.Scoper = s
		defer func() { f.scopes.Reset(); f.tape.Scoper = nil }()
	}
	return fn(&f.tape)
}

// Backward computes gradients of the loss, scaled by the loss scaler, and
// adds them to those of earlier backwards since the last Step (gradient
// accumulation: weight each micro-batch's loss, see NoBackwardSync).
func (f *Fabric) Backward(loss *autograd.Var) error { return f.backward(context.Background(), loss) }

func (f *Fabric) backward(ctx context.Context, loss *autograd.Var) error {
	if err := f.ready("Backward"); err != nil {
		return err
	}
	if loss == nil || loss.Value == nil {
		return errors.New("fabric: Backward: the loss is nil; pass the scalar a forward pass computed")
	}
	if loss.Value.Len() == 1 && f.nonFinite == nil {
		if l := loss.Value.Item(); math.IsNaN(l) || math.IsInf(l, 0) {
			f.nonFinite = fmt.Errorf("step %d: loss is %v: %s", f.steps, l, f.diagnose())
		}
	}
	run := func() error {
		return f.guardTensors(ctx, func() error { return f.tape.BackwardScaled(loss, f.scaler.Scale()) })
	}
	if f.dist == nil {
		return run()
	}
	f.dist.BeginBackward()
	if err := f.dist.Guard(run); err != nil {
		return err
	}
	return f.dist.SyncGrads(ctx)
}

// ClipGradNorm unscales the gradients (once per step) and rescales them so
// that their global L2 norm is at most maxNorm; it returns the norm before
// clipping, as torch.nn.utils.clip_grad_norm_ does: the gradients are
// multiplied by min(maxNorm/(norm+1e-6), 1). The norm is that of the
// gradients as one device holds them, summed over the chunks of every
// rank when the strategy shards them. A non-finite norm under a loss
// scaler, whose Step then skips, leaves the gradients as they are.
func (f *Fabric) ClipGradNorm(maxNorm float64) (float64, error) {
	if !(maxNorm > 0) {
		return 0, fmt.Errorf("fabric: clip norm %g: must be positive", maxNorm)
	}
	params, err := f.unscaled()
	if err != nil {
		return 0, err
	}
	sq, err := f.gradSquares(params)
	if err != nil {
		return 0, err
	}
	norm := math.Sqrt(sq)
	if !isFinite(norm) && f.plan.ScalesLoss() {
		return norm, nil
	}
	if coef := maxNorm / (norm + 1e-6); !(coef >= 1) { // NaN too, as torch's clamp keeps it
		for _, p := range params {
			if p.Var.Grad != nil {
				p.Var.Grad.ScaleInPlace(coef)
			}
		}
	}
	return norm, nil
}

// Step steps the optimizer through the loss scaler (skipped if a gradient
// is inf or NaN), updates the scale and clears the gradients.
func (f *Fabric) Step() (skipped bool, err error) { return f.step(context.Background()) }

func (f *Fabric) step(ctx context.Context) (skipped bool, err error) {
	if err := f.ready("Step"); err != nil {
		return false, err
	}
	skipped, err = f.scaler.Step(f.opt)
	if err != nil {
		return false, fmt.Errorf("fabric: step %d: %w", f.steps, err)
	}
	f.scaler.Update()
	f.opt.ZeroGrad()
	if f.dist != nil {
		if err := f.dist.AfterStep(ctx); err != nil {
			return false, fmt.Errorf("fabric: step %d: %w", f.steps, err)
		}
	}
	f.steps++
	return skipped, nil
}

// States returns the checkpointable precision state of every plugin in
// use, keyed by plugin name (prefixed by the rule that chose it, for
// plugins that per-module rules bring in), and the loss scaler's.
func (f *Fabric) States() map[string]precision.Stateful {
	out := map[string]precision.Stateful{}
	var scopes []precision.Scope // none before Setup: the loss scaler's state alone
	if f.plan != nil {
		scopes = f.plan.Scopes
	}
	for _, s := range scopes {
		prefix := ""
		if s.Rule >= 0 {
			prefix = fmt.Sprintf("rule%d/", s.Rule)
		}
		for name, st := range precision.States(s.Plugin) {
			out[prefix+name] = st
		}
	}
	if st, ok := f.scaler.(precision.Stateful); ok {
		out["loss-scaler"] = st
	}
	return out
}

// StepCount returns the number of steps taken (Step's and TrainStep's,
// skipped ones too).
func (f *Fabric) StepCount() int { return f.steps }

// LossScale is the current loss scale (1 without a scaler).
func (f *Fabric) LossScale() float64 { return f.scaler.Scale() }

// NonFinite returns nil while every loss has been finite, else the first
// step whose loss was not, and why.
func (f *Fabric) NonFinite() error { return f.nonFinite }

// diagnose explains a non-finite loss: a parameter that is no longer
// finite, else the forward pass.
func (f *Fabric) diagnose() string {
	if why := f.NonFiniteParams(); why != "" {
		return why
	}
	return "the forward pass overflowed or underflowed"
}

// paramsNonFinite is NonFiniteParams agreed over the ranks: every rank
// learns whether any holds a non-finite parameter (its chunk, under a
// sharding strategy); why names it on the rank that holds it.
func (f *Fabric) paramsNonFinite(ctx context.Context) (why string, any bool, err error) {
	why = f.NonFiniteParams()
	flag := tensor.Scalar(dtype.F32, 0)
	defer tensor.Free(flag)
	if why != "" {
		flag.Fill(1)
	}
	agreed, err := f.AllReduce(ctx, flag, Max)
	if err != nil {
		return "", false, err
	}
	defer tensor.Free(agreed)
	if agreed.Item() == 0 {
		return "", false, nil
	}
	if why == "" {
		why = "a parameter another rank holds is inf/NaN"
	}
	return why, true, nil
}

// NonFiniteParams names a parameter that holds inf/NaN and, if the
// optimizer can tell, the value that underflowed; "" when all are finite.
func (f *Fabric) NonFiniteParams() string {
	if f.opt == nil {
		return ""
	}
	for _, p := range f.opt.Params() {
		// A weight a quantizer froze stays listed, as codes (no NaN to
		// hold) or, built on shapes, as a stand-in without storage.
		if v := p.Var.Value; v.IsMeta() || !v.DType().IsFloat() || !v.HasNonFinite() {
			continue
		}
		why := fmt.Sprintf("parameter %s (%s) holds inf/NaN since an optimizer step", p.Path, p.Var.Value.DType())
		if f.steps > 0 {
			why = fmt.Sprintf("after the optimizer step of step %d, parameter %s (%s) holds inf/NaN", f.steps-1, p.Path, p.Var.Value.DType())
		}
		if e, ok := f.opt.(interface{ Underflow(path string) error }); ok {
			if err := e.Underflow(p.Path); err != nil {
				why += ": " + err.Error()
			}
		}
		return why
	}
	return ""
}

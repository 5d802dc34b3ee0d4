// Package precision makes numeric precision composable. A plugin is any
// value with a Name; what it does is the set of role interfaces below that it
// implements. The fabric and the strategies ask for roles through the helper
// functions at the bottom of this file, never for a concrete plugin type;
// the helpers also see through Compose.
package precision

import (
	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim/lowbit"
	"github.com/weftml/weft/tensor"
)

// Plugin is the whole required interface of a precision plugin.
type Plugin interface {
	// Name is the plugin's spec string ("bf16-mixed"); checkpoint state is
	// keyed by it.
	Name() string
}

// ModuleConverter converts one module before training: replaces its
// arithmetic (an FP8 Linear, a quantized Linear). It is called for every
// module its plugin governs, with the module's dotted path; converters run
// in composition order, before the storage cast. If no plugin implements
// it, the model trains as built.
type ModuleConverter interface {
	ConvertModule(path string, m nn.Module) error
}

// ConversionReporter is a ModuleConverter that says why it left a module
// it could have converted (a Linear) as it was. Resolution.Convert holds
// such a converter to converting something: one that converts no Linear
// of the modules a per-module rule gives it is an error, one that converts
// none of the whole model a warning, and the Linears it leaves beside
// others it converts are listed in a warning. If a converter does not
// implement it, Convert expects nothing of it.
type ConversionReporter interface {
	ModuleConverter
	// Declined says why ConvertModule left the module at path as it was
	// ("is 576→10, FP8 needs in%8==0 and out%16==0", read after the
	// path); ok is false for a module it converted or never converts.
	Declined(path string) (why string, ok bool)
}

// StorageOwner stores the parameters it governs in StorageDType (the master
// weights the optimizer updates). If no plugin implements it, parameters
// keep the dtype they were built in (float32).
type StorageOwner interface {
	StorageDType() dtype.DType
}

// Autocaster is the compute role: inside the forward scope it picks the
// dtype each op's floating inputs are cast to (autograd.Caster). If no
// plugin implements it, every op runs in its inputs' dtype.
type Autocaster interface {
	autograd.Caster
}

// InputCaster gives the dtype floating inputs are cast to on entering the
// plugin's scope. If no plugin implements it, inputs pass unchanged.
type InputCaster interface {
	InputDType() dtype.DType
}

// OutputCaster gives the dtype floating outputs are cast to on leaving the
// forward pass. If no plugin implements it, outputs pass unchanged.
type OutputCaster interface {
	OutputDType() dtype.DType
}

// LossScaler owns loss scaling for the whole model. If no plugin
// implements it, the fabric uses a scaler that never scales or skips.
type LossScaler interface {
	Scaler() Scaler
}

// OptimizerStater picks the dtype of optimizer state (Adam's moments). If
// no plugin implements it, state takes each parameter's dtype, as in PyTorch.
type OptimizerStater interface {
	OptimizerStateDType() dtype.DType
}

// OptimizerQuantizer keeps Adam's moments as low-bit codes with a float32
// scale a block, in the format OptimizerFormat names, as bitsandbytes'
// 8-bit and torchao's 4-bit and FP8 optimizers do (optim.AdamState). It
// holds the optimizer-state role, as OptimizerStater does: a composition
// holds one or the other. If no plugin implements it, the moments are
// float tensors.
type OptimizerQuantizer interface {
	OptimizerFormat() *lowbit.Format
}

// StochasticRounder has the optimizer round the new values of the
// bfloat16 parameters it updates stochastically, as torchao's AdamW with
// bf16_stochastic_round=True does (optim.StochasticRound), when
// RoundsStochastically is true. If no plugin implements it, or it
// returns false, they round to nearest even.
type StochasticRounder interface {
	RoundsStochastically() bool
}

// Trainer trains only the parameters it lists (LoRA's adapters, which it
// adds to the modules it converts): the fabric stops gradients at every
// other parameter of the model, so that they take no gradient or
// optimizer memory. If no plugin implements it, every parameter trains.
type Trainer interface {
	Params() []nn.NamedParam
}

// Stateful plugins have state that belongs in a checkpoint (a loss scale, a
// growth tracker, amax histories), saved under the plugin's Name. Plugins
// without it save nothing.
type Stateful interface {
	MarshalState() ([]byte, error)
	UnmarshalState([]byte) error
}

// RankAgreer is the rank-agreement role: a plugin whose decisions every
// rank must share (a loss scaler skips a step when any rank found inf/NaN;
// an FP8 recipe casts a tensor with one scale, from the amax over ranks).
// On several ranks the fabric hands it the rank's reductions once, at
// setup. If no plugin implements it, or on one device, where it is never
// called, each plugin decides from its own rank's values alone.
type RankAgreer interface {
	AgreeOver(r comm.Agreement)
}

// Seeder draws random bits (nvfp4's stochastic rounding of gradients)
// keyed by the run's seed and the rank's index among all ranks, which the
// fabric hands it once, at setup, before any step: each rank draws its own
// bits, as each GPU does. If no plugin implements it, none draws random
// bits.
type Seeder interface {
	UseSeed(seed uint64, rank int)
}

// GatherQuantizer picks the wire format of the all-gathers of a parameter
// (FSDP): FP8 recipes send their Linears' weights as FP8 bytes with the
// scale the next forward pass casts them with; a scale of 0 asks for a
// plain cast to dt (to nearest even), which the receivers cast back to the
// parameter's storage dtype, as param_dtype does (CommPolicy). If no
// plugin implements it, or all decline (ok false), parameters are gathered
// as Scope.GatherFormat derives from the compute role.
type GatherQuantizer interface {
	GatherFormat(param string) (dt dtype.DType, scale float32, ok bool)
}

// GradReducer picks the dtype a parameter's gradient is reduced in
// (FSDP2's reduce_dtype, CommPolicy): the gradient is cast to it before
// the reduce-scatter or all-reduce and the mean cast back once after. If
// no plugin implements it, or it declines (ok false), gradients are
// reduced in their own dtype.
type GradReducer interface {
	ReduceDType(param string) (dt dtype.DType, ok bool)
}

// A GatherUser computes with a parameter gathered in its GatherFormat as
// it arrives (the weight codes of an FP8 GEMM), so that under FSDP the
// whole weight exists only in the narrow format: UseGathered hands it the
// whole codes, cast with scale, and this rank's chunk of the weight in its
// storage dtype (from which it takes what it records of the weight, such
// as its amax, agreed over ranks), and reports whether it took them;
// DropGathered tells it the codes are freed. A parameter a plugin does not
// take is decoded to its storage dtype instead.
type GatherUser interface {
	UseGathered(param string, codes, chunk *tensor.Tensor, scale float32) bool
	DropGathered(param string)
}

// A GatherCoder casts the weights of its Linears for FSDP's all-gathers
// itself (the block-scaled FP8 and FP4 recipes): GatherCodec returns the
// codec of the parameter at param for the forward's GEMMs, the
// backward's or both, nil if it is not one of its; the decoded weight is
// its until DropCoded.
type GatherCoder interface {
	GatherCodec(param string, forward, backward bool) comm.Codec
	DropCoded(param string)
}

// GatherCodec returns the codec of the parameter at path that a
// GatherCoder member of p offers, or nil.
func GatherCodec(p Plugin, path string, forward, backward bool) comm.Codec {
	for _, m := range Members(p) {
		if g, ok := m.(GatherCoder); ok {
			if c := g.GatherCodec(path, forward, backward); c != nil {
				return c
			}
		}
	}
	return nil
}

// UseGathered offers p's GatherUser members the gathered codes of the
// parameter at path; false if none took them.
func UseGathered(p Plugin, path string, codes, chunk *tensor.Tensor, scale float32) bool {
	for _, m := range Members(p) {
		if u, ok := m.(GatherUser); ok && u.UseGathered(path, codes, chunk, scale) {
			return true
		}
	}
	return false
}

// DropGathered tells p's GatherUser and GatherCoder members that the
// codes of the parameter at path are freed.
func DropGathered(p Plugin, path string) {
	for _, m := range Members(p) {
		if u, ok := m.(GatherUser); ok {
			u.DropGathered(path)
		}
		if c, ok := m.(GatherCoder); ok {
			c.DropCoded(path)
		}
	}
}

// GatherFormat returns the wire format p wants the parameter at path
// gathered in; ok is false for the storage dtype.
func GatherFormat(p Plugin, path string) (dt dtype.DType, scale float32, ok bool) {
	for _, m := range Members(p) {
		if g, isG := m.(GatherQuantizer); isG {
			if dt, scale, ok = g.GatherFormat(path); ok {
				return dt, scale, true
			}
		}
	}
	return dtype.Invalid, 0, false
}

// ReduceDType returns the dtype p wants the gradient of the parameter at
// path reduced in; ok is false for the gradient's own.
func ReduceDType(p Plugin, path string) (dt dtype.DType, ok bool) {
	if g, ok := role[GradReducer](p); ok {
		return g.ReduceDType(path)
	}
	return dtype.Invalid, false
}

// GatherFormat returns the wire format of the all-gathers of s's module's
// parameter param: the one its plugin asks for (GatherFormat), else, for
// a Linear or Conv2d whose arithmetic is its own, the dtype autocast
// rounds the parameter to where that is narrower than its storage: the
// GEMM would round it so anyway, so the gather halves its bytes and
// changes no value the model computes with (bf16-mixed gathers its
// Linears' weights and biases in bfloat16, its LayerNorms' and
// Embeddings' in float32). ok is false for the storage dtype.
func (s Scope) GatherFormat(param string) (dt dtype.DType, scale float32, ok bool) {
	if dt, scale, ok = GatherFormat(s.Plugin, nn.Join(s.Path, param)); ok {
		return dt, scale, true
	}
	var op autograd.Op
	switch m := s.Module.(type) {
	case *nn.Linear:
		if m.GEMM != nil || m.Split != nil && param == "bias" { // a split may add the bias after its reduction
			return dtype.Invalid, 0, false
		}
		op = autograd.OpLinear
	case *nn.Conv2d:
		op = autograd.OpConv2d
	default:
		return dtype.Invalid, 0, false
	}
	a := Autocast(s.Plugin)
	for _, q := range s.Module.Params() {
		if q.Name != param || a == nil {
			continue
		}
		stored := q.Var.Value.DType()
		if dt := a.CastInput(op, stored); (dt == dtype.BF16 || dt == dtype.F16) && dt.Bits() < stored.Bits() {
			return dt, 0, true
		}
	}
	return dtype.Invalid, 0, false
}

// role returns the member of p (p itself, or one of the plugins it
// composes) that implements R. Compose guarantees exclusive roles have one.
func role[R any](p Plugin) (R, bool) {
	for _, m := range Members(p) {
		if r, ok := m.(R); ok {
			return r, true
		}
	}
	var zero R
	return zero, false
}

// Members lists the plugins p is made of: p's own members if it is a
// composition, else p alone.
func Members(p Plugin) []Plugin {
	if c, ok := p.(interface{ Unwrap() []Plugin }); ok {
		return c.Unwrap()
	}
	return []Plugin{p}
}

// Autocast returns p's compute role, or nil (ops run in their inputs' dtype).
func Autocast(p Plugin) autograd.Caster {
	if a, ok := role[Autocaster](p); ok {
		return a
	}
	return nil
}

// StorageDType returns the dtype p stores parameters in; ok is false when
// parameters keep their dtype.
func StorageDType(p Plugin) (dt dtype.DType, ok bool) {
	if s, ok := role[StorageOwner](p); ok {
		return s.StorageDType(), true
	}
	return dtype.Invalid, false
}

// InputDType returns the dtype p casts floating inputs to; ok is false when
// inputs pass unchanged.
func InputDType(p Plugin) (dt dtype.DType, ok bool) {
	if c, ok := role[InputCaster](p); ok {
		return c.InputDType(), true
	}
	return dtype.Invalid, false
}

// OutputDType returns the dtype p casts floating outputs to; ok is false
// when outputs pass unchanged.
func OutputDType(p Plugin) (dt dtype.DType, ok bool) {
	if c, ok := role[OutputCaster](p); ok {
		return c.OutputDType(), true
	}
	return dtype.Invalid, false
}

// ScalerOf returns p's loss scaler, or one that does nothing.
func ScalerOf(p Plugin) Scaler {
	if s, ok := role[LossScaler](p); ok {
		return s.Scaler()
	}
	return noScaler{}
}

// ScalesLoss reports whether p owns loss scaling.
func ScalesLoss(p Plugin) bool {
	_, ok := role[LossScaler](p)
	return ok
}

// OptimizerStateDType returns the dtype p wants optimizer state in;
// ok is false when state follows the parameters.
func OptimizerStateDType(p Plugin) (dt dtype.DType, ok bool) {
	if o, ok := role[OptimizerStater](p); ok {
		return o.OptimizerStateDType(), true
	}
	return dtype.Invalid, false
}

// OptimizerFormat returns the low-bit format p keeps optimizer state in;
// nil when the moments are float tensors.
func OptimizerFormat(p Plugin) *lowbit.Format {
	if o, ok := role[OptimizerQuantizer](p); ok {
		return o.OptimizerFormat()
	}
	return nil
}

// RoundsStochastically reports whether p has the optimizer round
// bfloat16 parameters stochastically.
func RoundsStochastically(p Plugin) bool {
	r, ok := role[StochasticRounder](p)
	return ok && r.RoundsStochastically()
}

// TrainedParams returns the only parameters p trains (Trainer's); ok is
// false when every parameter of the model trains.
func TrainedParams(p Plugin) (params []nn.NamedParam, ok bool) {
	if t, ok := role[Trainer](p); ok {
		return t.Params(), true
	}
	return nil, false
}

// ConvertsModules reports whether p replaces modules' arithmetic (the
// ModuleConverter role).
func ConvertsModules(p Plugin) bool {
	_, ok := role[ModuleConverter](p)
	return ok
}

// AgreeOver gives every member of p that must agree with other ranks
// their reductions.
func AgreeOver(p Plugin, r comm.Agreement) {
	for _, m := range Members(p) {
		if a, ok := m.(RankAgreer); ok {
			a.AgreeOver(r)
		}
	}
}

// UseSeed gives every member of p that draws random bits the run's seed
// and the rank's index.
func UseSeed(p Plugin, seed uint64, rank int) {
	for _, m := range Members(p) {
		if s, ok := m.(Seeder); ok {
			s.UseSeed(seed, rank)
		}
	}
}

// States returns p's checkpointable members by name.
func States(p Plugin) map[string]Stateful {
	out := map[string]Stateful{}
	for _, m := range Members(p) {
		if s, ok := m.(Stateful); ok {
			out[m.Name()] = s
		}
	}
	return out
}

// ConvertModule runs p's module conversion pipeline on every module of m:
// layer replacements in composition order, then the cast of every
// parameter to p's storage dtype.
func ConvertModule(p Plugin, m nn.Module) error {
	res, err := Policy{Default: Once(p)}.Resolve(m, LossScalingAuto)
	if err != nil {
		return err
	}
	return res.Convert()
}

// Enter opens p's forward scope on tp: its compute role becomes the tape's
// caster until the scope's Exit restores the previous one. Call Exit with
// defer so that an error or panic restores the engine too:
//
//	defer precision.Enter(p, tp).Exit()
func Enter(p Plugin, tp *autograd.Tape) Forward {
	s := Forward{tape: tp, prev: tp.Caster}
	tp.Caster = Autocast(p)
	return s
}

// Forward is the forward scope Enter opened.
type Forward struct {
	tape *autograd.Tape
	prev autograd.Caster
}

// Exit restores the Caster the tape had before Enter.
func (s Forward) Exit() { s.tape.Caster = s.prev }

package precision

import (
	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/optim/lowbit"
)

// True trains everything in one dtype, as Lightning's DoublePrecision
// ("64-true"), Precision ("32-true") and HalfPrecision ("bf16-true",
// "16-true") do: the module is cast to DType, floating inputs are cast to
// DType, every op rounds its result to DType (so AdamW's state is DType
// too), and floating outputs are cast to float32 for the loss.
type True struct {
	DType dtype.DType
	Comm  CommPolicy // the spec's param_dtype and reduce_dtype
	// Stochastic is the spec's stochastic_round (bf16-true only): the
	// optimizer rounds the parameters' new values to bfloat16
	// stochastically, as torchao's bf16_stochastic_round does.
	Stochastic bool
}

func (p True) Name() string              { return trueNames[p.DType] }
func (p True) InputDType() dtype.DType   { return p.DType }
func (p True) OutputDType() dtype.DType  { return dtype.F32 }
func (p True) StorageDType() dtype.DType { return p.DType }

// GatherFormat is Comm's param_dtype (the GatherQuantizer role).
func (p True) GatherFormat(string) (dtype.DType, float32, bool) { return p.Comm.gatherFormat() }

// ReduceDType is Comm's reduce_dtype (the GradReducer role).
func (p True) ReduceDType(string) (dtype.DType, bool) { return p.Comm.reduceDType() }

func (p True) commPolicy() CommPolicy { return p.Comm }

// RoundsStochastically is Stochastic (the StochasticRounder role).
func (p True) RoundsStochastically() bool { return p.Stochastic }

var trueNames = map[dtype.DType]string{dtype.F64: "64-true", dtype.F32: "32-true", dtype.F16: "16-true", dtype.BF16: "bf16-true"}

// Pure is True without the float32 output cast: the loss too is computed in
// DType. It is the "float64-manual" reference run: plain PyTorch, no Fabric.
type Pure struct {
	DType dtype.DType
}

func (p Pure) Name() string              { return p.DType.String() }
func (p Pure) InputDType() dtype.DType   { return p.DType }
func (p Pure) StorageDType() dtype.DType { return p.DType }

// Mixed is Lightning's MixedPrecision without a scaler ("bf16-mixed"):
// float32 parameters, CUDA autocast to DType inside the forward scope,
// floating inputs cast to DType and outputs to float32.
type Mixed struct {
	DType dtype.DType
	Comm  CommPolicy // the spec's param_dtype and reduce_dtype
}

func (p *Mixed) Name() string {
	return map[dtype.DType]string{dtype.F16: "16-mixed", dtype.BF16: "bf16-mixed"}[p.DType]
}
func (p *Mixed) InputDType() dtype.DType  { return p.DType }
func (p *Mixed) OutputDType() dtype.DType { return dtype.F32 }

// GatherFormat is Comm's param_dtype (the GatherQuantizer role); without
// one, Scope.GatherFormat gathers the weights autocast rounds anyway in
// DType.
func (p *Mixed) GatherFormat(string) (dtype.DType, float32, bool) { return p.Comm.gatherFormat() }

// ReduceDType is Comm's reduce_dtype (the GradReducer role).
func (p *Mixed) ReduceDType(string) (dtype.DType, bool) { return p.Comm.reduceDType() }

func (p *Mixed) commPolicy() CommPolicy { return p.Comm }

// CastInput follows CUDA autocast: low precision for GEMM-like ops, float32
// for numerically sensitive ones, anything else in its inputs' dtype
// (float64 is never autocast).
func (p *Mixed) CastInput(op autograd.Op, in dtype.DType) dtype.DType {
	switch {
	case in == dtype.F64:
		return in
	case lowPrecisionOps[op]:
		return p.DType
	case float32Ops[op]:
		return dtype.F32
	}
	return in
}

// MixedScaled is "16-mixed": Mixed autocast plus a dynamic GradScaler,
// which brings the loss-scaling and state roles.
type MixedScaled struct {
	*Mixed
	*GradScaler
}

func (p MixedScaled) Name() string { return p.Mixed.Name() }

// lowPrecisionOps run in the autocast dtype: CUDA autocast's lower_precision_fp list.
var lowPrecisionOps = map[autograd.Op]bool{
	autograd.OpLinear: true, autograd.OpMatMul: true, autograd.OpConv2d: true,
}

// float32Ops run in float32 under autocast: CUDA autocast's fp32 list
// (layer_norm, softmax, log_softmax, the losses, exp/log/pow/sum), and
// rms_norm, which HF's Llama computes in float32 under any autocast.
var float32Ops = map[autograd.Op]bool{
	autograd.OpLayerNorm: true, autograd.OpRMSNorm: true, autograd.OpSoftmax: true, autograd.OpCrossEntropy: true,
}

// CommPolicy is PyTorch FSDP2's MixedPrecisionPolicy for the parameters a
// plugin governs, as the spec arguments param_dtype and reduce_dtype set
// it ("bf16-mixed(param_dtype=bfloat16,reduce_dtype=float32)"). Its zero
// value asks for nothing: parameters travel as Scope.GatherFormat says and
// gradients in their own dtype.
type CommPolicy struct {
	// ParamDType is the dtype every parameter is all-gathered in under a
	// strategy that shards parameters (fsdp, hsdp): each rank rounds its
	// chunk to it (to nearest even) and casts the whole back to the
	// parameter's storage dtype, in which the model computes; Invalid for
	// none.
	ParamDType dtype.DType
	// ReduceDType is the dtype gradients are reduced in: each rank casts
	// its gradient to it, the ranks sum in it, and the mean is cast back
	// to the gradient's dtype once; Invalid for their own.
	ReduceDType dtype.DType
}

func (c CommPolicy) gatherFormat() (dtype.DType, float32, bool) {
	return c.ParamDType, 0, c.ParamDType != dtype.Invalid
}

func (c CommPolicy) reduceDType() (dtype.DType, bool) {
	return c.ReduceDType, c.ReduceDType != dtype.Invalid
}

// commPolicied is a plugin that takes param_dtype and reduce_dtype.
type commPolicied interface{ commPolicy() CommPolicy }

// commClaim is what member p claims of role, FSDP2's policy (see
// exclusiveRoles): a plugin that takes the arguments claims the role only
// if its argument is set, any other plugin of role R by implementing it.
func commClaim[R any](arg string, dt func(CommPolicy) dtype.DType) func(Plugin) (string, bool) {
	return func(p Plugin) (string, bool) {
		if c, ok := p.(commPolicied); ok {
			d := dt(c.commPolicy())
			return arg + "=" + d.String(), d != dtype.Invalid
		}
		_, ok := p.(R)
		return "", ok
	}
}

// LowBitState ("adamw8bit", "adamw4bit", "adamwfp8") keeps AdamW's
// moments in Format, as bitsandbytes' AdamW8bit or torchao's AdamW4bit
// and AdamWFp8 do: codes and a float32 scale a block; each step decodes
// them to float32, updates and encodes them again
// (tensor.AdamWLowBitStep). Unlike those it quantizes every parameter's
// moments, not only those of 4096 elements or more. It holds the
// optimizer-state role alone, so it composes with any spec that leaves
// that role free ("bf16-mixed+adamw4bit").
type LowBitState struct{ Format *lowbit.Format }

func (s LowBitState) Name() string                    { return s.Format.Name }
func (s LowBitState) OptimizerFormat() *lowbit.Format { return s.Format }

package precision

import (
	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/dtype/dynamic"
)

// True trains everything in one dtype, as Lightning's DoublePrecision
// ("64-true"), Precision ("32-true") and HalfPrecision ("bf16-true",
// "16-true") do: the module is cast to DType, floating inputs are cast to
// DType, every op rounds its result to DType (so AdamW's state is DType
// too), and floating outputs are cast to float32 for the loss.
type True struct {
	DType dtype.DType
}

func (p True) Name() string              { return trueNames[p.DType] }
func (p True) InputDType() dtype.DType   { return p.DType }
func (p True) OutputDType() dtype.DType  { return dtype.F32 }
func (p True) StorageDType() dtype.DType { return p.DType }

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
}

func (p *Mixed) Name() string {
	return map[dtype.DType]string{dtype.F16: "16-mixed", dtype.BF16: "bf16-mixed"}[p.DType]
}
func (p *Mixed) InputDType() dtype.DType  { return p.DType }
func (p *Mixed) OutputDType() dtype.DType { return dtype.F32 }

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

// AdamW8bit ("adamw8bit") keeps AdamW's moments as bitsandbytes'
// AdamW8bit does: m as codes of the signed dynamic map, v of the unsigned
// one, one byte an element, and a float32 absmax a block of 256 elements;
// each step decodes them to float32, updates as AdamW does and encodes them
// again (tensor.AdamW8Step). Unlike bitsandbytes it quantizes every
// parameter's moments, not only those of 4096 elements or more. It holds
// the optimizer-state role alone, so it composes with any spec that leaves
// that role free ("bf16-mixed+adamw8bit").
type AdamW8bit struct{}

func (AdamW8bit) Name() string        { return "adamw8bit" }
func (AdamW8bit) OptimizerBlock() int { return dynamic.BlockSize }

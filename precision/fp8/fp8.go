// Package fp8 trains Linear layers with FP8 GEMMs, as NVIDIA's Transformer
// Engine does: the operands of a layer's three GEMMs (forward, input
// gradient, weight gradient) are scaled, cast to an 8-bit float with
// saturation, and multiplied with float32 accumulation.
//
// Its plugins hold only the module-conversion role: they install their
// arithmetic through nn.Linear's GEMM hook and claim no storage, autocast
// or loss scaling, so they compose with any plugin that does. Package
// precision registers them as the specs "fp8" (Delayed), "fp8-current"
// (Current), "fp8-mx" (MX), "fp8-block" (Block), "fp8-rowwise" and
// "fp8-rowwise-gw-hp" (Rowwise), and the 4-bit "mxfp4" (MXFP4) and "nvfp4" (NVFP4), whose
// operands are E2M1; this package does not import it.
package fp8

import (
	"fmt"
	"math"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/vec"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// Format names a recipe's FP8 dtypes, as Transformer Engine's
// recipe.Format does: Forward for inputs and weights, Backward for output
// gradients.
type Format struct {
	Forward, Backward dtype.DType
}

var (
	// Hybrid spends E4M3's extra mantissa bit on values and E5M2's extra
	// range on gradients, which span more orders of magnitude.
	Hybrid = Format{Forward: dtype.E4M3FN, Backward: dtype.E5M2}
	E4M3   = Format{Forward: dtype.E4M3FN, Backward: dtype.E4M3FN}
	E5M2   = Format{Forward: dtype.E5M2, Backward: dtype.E5M2}
	// FP4 is MXFP4's: E2M1 for every operand.
	FP4 = Format{Forward: dtype.E2M1, Backward: dtype.E2M1}
)

// valid reports whether both of f's dtypes are 8-bit (or, for MXFP4,
// 4-bit) floats that hold values (E8M0 holds only scales).
func (f Format) valid() bool {
	for _, dt := range []dtype.DType{f.Forward, f.Backward} {
		if dt.Bits() != 8 && dt != dtype.E2M1 || !dt.IsFloat() || dt == dtype.E8M0 {
			return false
		}
	}
	return true
}

// Filter decides from a Linear's in and out features whether it gets FP8
// GEMMs; the others keep their arithmetic. A nil Filter is DefaultFilter.
type Filter func(in, out int) bool

// DefaultFilter admits the Linears Lightning hands to Transformer Engine:
// in divisible by 8 and out by 16, the alignment FP8 tensor cores need.
func DefaultFilter(in, out int) bool { return in%8 == 0 && out%16 == 0 }

// admits applies f, or DefaultFilter when f is nil.
func (f Filter) admits(in, out int) bool {
	if f == nil {
		return DefaultFilter(in, out)
	}
	return f(in, out)
}

// rejection says why f leaves a Linear in→out as it was, after its path.
func (f Filter) rejection(in, out int) string {
	if f == nil {
		return fmt.Sprintf("is %d→%d, FP8 needs in%%8==0 and out%%16==0", in, out)
	}
	return fmt.Sprintf("is %d→%d, which the plugin's Filter rejects", in, out)
}

// role is the part a tensor plays in a layer's GEMMs; delayed scaling keeps
// its state per role.
type role int

const (
	roleX  role = iota // the input
	roleW              // the weight
	roleDY             // the output gradient
	numRoles
)

var roleNames = [numRoles]string{"x", "w", "dy"}

// quantizer casts the matrices of one layer's GEMMs to FP8: each scaling
// recipe is one.
type quantizer interface {
	// quantize casts the matrix t, which plays role r, to dt in pass p.
	quantize(r role, t *tensor.Tensor, dt dtype.DType, p pass) quantized
}

// pass is the kind of pass a cast belongs to, which decides what a
// recipe with state (delayed scaling) records.
type pass int

const (
	// training: the cast's amax enters the history and the scale updates.
	training pass = iota
	// again: the recompute of a checkpointed forward, or backward's casts
	// of x and w, which cast with the scale of the forward's and record
	// nothing.
	again
	// evaluation: a pass that records nothing for backward (tape.NoGrad:
	// validation, sampling, a NaN diagnosis). It casts with the scale the
	// next training cast will use and records nothing, so that how often
	// a run evaluates cannot change its training. Transformer Engine
	// skips its amax reduction and scale update likewise when grad mode
	// is off (fp8_autocast_exit: reduce_and_update_fp8_tensors only if
	// torch.is_grad_enabled()), whatever module.training says.
	evaluation
)

// forwardPass is the pass of a forward cast on tp.
func forwardPass(tp *autograd.Tape) pass {
	switch {
	case tp.Recomputing():
		return again
	case tp.NoGrad:
		return evaluation
	}
	return training
}

// quantized is a matrix cast for the GEMMs that read it.
type quantized interface {
	// along returns the operand for a GEMM that reduces along axis of the
	// stored matrix: 1 along its rows, 0 down its columns.
	along(axis int) operand
	// free returns the cast matrix's storage once no GEMM needs it.
	free()
}

// operand is what a GEMM multiplies: t's elements times scale.
type operand struct {
	t     *tensor.Tensor
	scale float32
}

// along implements quantized: one per-tensor scale serves every GEMM.
func (o operand) along(int) operand { return o }

func (o operand) free() { tensor.Free(o.t) }

// lent is an operand whose matrix belongs to someone else (FSDP's gathered
// weight codes): freeing it leaves them alone.
type lent struct{ operand }

func (lent) free() {}

func matmul(a, b operand, transA, transB bool, out dtype.DType) *tensor.Tensor {
	return tensor.ScaledMatMul(a.t, b.t, transA, transB, a.scale, b.scale, out)
}

// linear is the FP8 arithmetic of one Linear layer (its nn.LinearGEMM).
type linear struct {
	owner  any // the plugin that installed it
	format Format
	q      quantizer
	weight *autograd.Var // the Linear's
	// coded is the weight as FSDP gathered it in codes (codedLinears),
	// nil while the layer casts the weight itself.
	coded *coded
}

// castWeight is the weight w cast for the GEMMs of pass p: as gathered,
// if it was.
func (l *linear) castWeight(w *tensor.Tensor, p pass) quantized {
	if l.coded != nil {
		return l.coded
	}
	return l.q.quantize(roleW, w, l.format.Forward, p)
}

// Operands are the recipe's FP8 dtypes (the nn.CastingGEMM role).
func (l *linear) Operands() (forward, backward dtype.DType) {
	return l.format.Forward, l.format.Backward
}

// Linear computes y = x·wᵀ + b with three FP8 GEMMs, Q being the recipe's
// cast:
//
//	forward          y  = Q(x)·Q(w)ᵀ   x, w in format.Forward
//	input gradient   dx = Q(dy)·Q(w)   dy in format.Backward
//	weight gradient  dw = Q(dy)ᵀ·Q(x)
//
// Products accumulate in float32. The bias is added in float32 before y is
// rounded once to the dtype autocast gives linear (x's dtype without
// autocast), and its gradient is dy summed in float32. Each gradient is
// rounded once to the dtype of its tensor.
func (l *linear) Linear(tp *autograd.Tape, x, w, b *autograd.Var) *autograd.Var {
	xShape := x.Value.Shape()
	in, out := w.Value.Dim(1), w.Value.Dim(0)
	outDType := x.Value.DType()
	if tp.Caster != nil {
		outDType = tp.Caster.CastInput(autograd.OpLinear, outDType)
	}
	x2 := x.Value.Reshape(-1, in)
	p := forwardPass(tp)
	qx := l.q.quantize(roleX, x2, l.format.Forward, p)
	tensor.Free(x2)
	qw := l.castWeight(w.Value, p)
	y := matmul(qx.along(1), qw.along(1), false, true, dtype.F32) // (M, out)
	// The FP8 copies are not kept for backward, which casts x and w again
	// with the scales used here: x lives on the tape anyway, and under
	// FSDP w is gathered again, so keeping them would hold a second copy
	// of every input and of the whole model between the passes.
	qx.free()
	qw.free()
	if b != nil {
		y = replace(y, tensor.AddBroadcast(y, b.Value, 1))
	}
	y = replace(y, y.To(outDType))
	var dims [8]int
	y.SetShape(append(append(dims[:0], xShape[:len(xShape)-1]...), out)...)
	return tp.RecordInputs(y, func(dy *tensor.Tensor) []*tensor.Tensor {
		dy2 := dy.Reshape(-1, out)
		// Backward runs once, a checkpointed forward's after its recompute:
		// dy's amax is always recorded.
		qdy := l.q.quantize(roleDY, dy2, l.format.Backward, training)
		x2 := x.Value.Reshape(-1, in)
		qx, qw := l.q.quantize(roleX, x2, l.format.Forward, again), l.castWeight(w.Value, again)
		tensor.Free(x2)
		grads := make([]*tensor.Tensor, 3) // for x, w, b
		if x.RequiresGrad() {
			grads[0] = matmul(qdy.along(1), qw.along(0), false, false, x.Value.DType())
			grads[0].SetShape(xShape...)
		}
		if w.RequiresGrad() {
			grads[1] = matmul(qdy.along(0), qx.along(0), true, false, w.Value.DType())
		}
		if b != nil {
			grads[2] = tensor.ReduceBroadcast(dy2, b.Value.Shape(), 1, b.Value.DType())
		}
		for _, q := range []quantized{qx, qw, qdy} {
			q.free()
		}
		tensor.Free(dy2)
		return grads
	}, x, w, b)
}

// replace frees old, a temporary, once new (which may be old itself) has
// taken its place.
func replace(old, new *tensor.Tensor) *tensor.Tensor {
	if new != old {
		tensor.Free(old)
	}
	return new
}

// eligible returns m as a Linear that owner should give FP8 GEMMs, or nil
// when m is not a Linear or owner has already converted it (converting
// twice changes nothing), or nil and why (after the path) when filter
// rejects its shape. A Linear whose GEMM another plugin has replaced is an
// error wrapping nn.ErrGEMMReplaced: one of the two would be lost. So is
// a format that is not FP8, whatever m is.
func eligible(m nn.Module, format Format, filter Filter, owner any) (l *nn.Linear, declined string, err error) {
	if !format.valid() {
		return nil, "", fmt.Errorf("fp8: format {%v %v}: want 8-bit float dtypes such as Hybrid's {%v %v}", format.Forward, format.Backward, Hybrid.Forward, Hybrid.Backward)
	}
	l, ok := m.(*nn.Linear)
	if !ok {
		return nil, "", nil
	}
	if g, ok := l.GEMM.(*linear); ok && g.owner == owner {
		return nil, "", nil
	}
	if l.GEMM != nil || l.Weight == nil {
		return nil, "", fmt.Errorf("fp8: %w by %T", nn.ErrGEMMReplaced, l.GEMM)
	}
	if w := l.Weight.Value; len(w.Shape()) != 2 {
		return nil, fmt.Sprintf("has a weight of shape %v, not a matrix", w.Shape()), nil
	} else if !filter.admits(w.Dim(1), w.Dim(0)) {
		return nil, filter.rejection(w.Dim(1), w.Dim(0)), nil
	}
	return l, "", nil
}

// amaxOf returns the largest |v| in vals, or NaN if one is NaN (as
// torch.amax, so that a NaN reaches the scale update).
func amaxOf(vals []float32) float32 {
	return vec.AbsMax(vals)
}

// castScaled returns t·scale cast to dt with saturation, as the operand
// that multiplies it back by 1/scale.
func castScaled(t *tensor.Tensor, scale float32, dt dtype.DType) operand {
	return operand{t: tensor.ScaleTo(t, scale, dt), scale: 1 / scale}
}

// updateScale is Transformer Engine's scale update: the scale that maps
// amax to fp8Max, divided by 2^margin for headroom. An amax that is 0, inf
// or NaN says nothing about the range, so prev is kept; a scale beyond
// float32 (a subnormal amax) becomes float32's max.
func updateScale(amax, prev, fp8Max float32, margin int) float32 {
	if !(amax > 0) || math.IsInf(float64(amax), 1) {
		return prev
	}
	s := float32(math.Ldexp(float64(fp8Max/amax), -margin))
	if math.IsInf(float64(s), 1) {
		return math.MaxFloat32
	}
	return s
}

// Package quant stores Linear weights quantized, as bitsandbytes does for
// PyTorch: 4-bit NF4 and FP4 with blockwise absmax scaling (optionally
// double-quantized, the "-dq" modes), and LLM.int8()'s row-wise int8 with
// outlier decomposition. Weights stay quantized in memory (NF4: half a
// byte a parameter plus the absmax constants) and are dequantized to the
// compute dtype each time a GEMM needs them. LoRA adds trainable low-rank
// adapters over frozen quantized (or plain) Linears: QLoRA.
//
// Its plugins hold only the module-conversion role: they install their
// arithmetic through nn.Linear's GEMM hook, so they compose with any
// storage, compute or loss-scaling plugin. Package precision registers
// FourBit as the specs "nf4", "nf4-dq", "fp4" and "fp4-dq" and Int8 as
// "int8" and "int8-training"; this package does not import it.
//
// A quantizing plugin freezes the weights it quantizes. An autograd.Var
// cannot stop requiring a gradient, so the weight leaves the layer
// instead: the Linear's Weight becomes nil, so Params no longer lists it,
// a storage cast (bf16-true's) leaves the quantized weight alone and
// checkpoints do not save it; its GEMM holds the weight as a constant that
// no gradient reaches; and the old Var, which an optimizer set up before
// conversion may still hold, keeps only the quantized codes and never gets
// a gradient. Gradients still flow to the layer's input and bias.
package quant

import (
	"fmt"
	"iter"
	"path"
	"slices"
	"strings"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision/internal/declined"
	"github.com/weftml/weft/tensor"
)

// Weight is a weight held quantized.
type Weight interface {
	// Shape is the shape of the weight it stands for.
	Shape() []int
	// Bytes counts the memory the quantized weight holds.
	Bytes() int
	// Dequantize returns the weight in dt, a fresh tensor the caller owns
	// (the Linears free it after their product).
	Dequantize(dt dtype.DType) *tensor.Tensor
	// Format names the quantization as FileFormats does ("nf4-dq", "int8").
	Format() string
}

var (
	_ Weight = (*Blockwise)(nil)
	_ Weight = (*RowWise)(nil)
)

// DefaultSkip keeps the output layer in float, as transformers keeps a
// model's lm_head out of bitsandbytes quantization; the reference models
// name it "head".
var DefaultSkip = []string{"head"}

// FourBit is the "nf4", "nf4-dq", "fp4" and "fp4-dq" plugin: bitsandbytes'
// Linear4bit as Lightning's BitsandbytesPrecision installs it. Each Linear
// it converts keeps its weight as a Blockwise tensor and computes
// y = x·deq(W)ᵀ + b with deq(W) in the compute dtype (the dtype autocast
// gives linear, else x's). Backward dequantizes W again for the input
// gradient, as bitsandbytes' MatMul4Bit does, so that only the 4-bit
// weight lives between the passes.
type FourBit struct {
	Codebook  *Codebook
	Double    bool // quantize the absmax constants too (the "-dq" modes)
	BlockSize int  // DefaultBlockSize
	// Skip lists the module paths left in float, as path.Match patterns
	// in which "." separates segments as "/" does ("head", "blocks.*.out");
	// DefaultSkip.
	Skip     []string
	declines declined.Log
}

// NewFourBit returns the plugin for cb with bitsandbytes' defaults.
func NewFourBit(cb *Codebook, double bool) *FourBit {
	return &FourBit{Codebook: cb, Double: double, BlockSize: DefaultBlockSize, Skip: slices.Clone(DefaultSkip)}
}

// Name is the spec string: the codebook's name, with "-dq" when Double.
func (p *FourBit) Name() string {
	if p.Double {
		return p.Codebook.Name() + "-dq"
	}
	return p.Codebook.Name()
}

// ConvertModule quantizes and freezes m's weight if m is an eligible Linear.
func (p *FourBit) ConvertModule(path string, m nn.Module) error {
	if p.BlockSize < 1 {
		return fmt.Errorf("quant: %s block size %d: must be positive", p.Name(), p.BlockSize)
	}
	l, why, err := eligible(path, m, p.Skip, p)
	if l == nil {
		p.declines.Note(path, why)
		return err
	}
	q := Quantize4(p.Codebook, l.Weight.Value, p.BlockSize, p.Double)
	freeze(l, &linear4{owner: p, q: q, deferred: deferredOf(l.Weight)}, q.Codes)
	return nil
}

// Declined says why ConvertModule left the Linear at path as it was (the
// precision.ConversionReporter role).
func (p *FourBit) Declined(path string) (string, bool) { return p.declines.Why(path) }

// linear4 is the arithmetic of a FourBit Linear.
type linear4 struct {
	owner    *FourBit
	q        *Blockwise
	deferred *deferred // the weight was built on shapes alone
}

// Materialize quantizes a weight built on shapes alone from its
// initialiser (see deferred).
func (g *linear4) Materialize() {
	if g.deferred != nil {
		w := g.deferred.draw()
		g.q = Quantize4(g.q.Codebook, w, g.q.BlockSize, g.q.Nested != nil)
		tensor.Free(w)
		g.deferred = nil
	}
}

func (g *linear4) Linear(tp *autograd.Tape, x, _, b *autograd.Var) *autograd.Var {
	return frozenLinear(tp, x, b, g.q, func(x, bias *tensor.Tensor) *tensor.Tensor {
		w := g.q.Dequantize(x.DType())
		defer tensor.Free(w) // dequantized for this product only, as bitsandbytes does
		return tensor.Linear(x, w, bias)
	})
}

// Frozen offers the packed codes for sharding, on whole blocks; the
// absmax constants stay whole (a sixteenth of the codes' bytes).
func (g *linear4) Frozen() []nn.Frozen {
	return []nn.Frozen{{Name: "codes", Value: &g.q.Codes, Block: max(1, g.q.BlockSize/2)}}
}

func (g *linear4) installer() plugin   { return g.owner }
func (g *linear4) base() nn.LinearGEMM { return nil }

// Int8 is the "int8" and "int8-training" plugin: bitsandbytes'
// Linear8bitLt with LLM.int8()'s mixed-precision decomposition, as
// Lightning installs it (threshold 6). Each GEMM quantizes its input
// row-wise and multiplies it in int8 by the weight quantized row-wise;
// input features holding an outlier are multiplied in the compute dtype
// instead (mixedLinear). "int8" freezes the weight in int8 (inference,
// has_fp16_weights=False); "int8-training" keeps the weight trainable in
// its dtype, quantizes it at every forward, and computes the weight
// gradient with an int8 GEMM too (weightGradInt8).
type Int8 struct {
	Training  bool
	Threshold float32  // DefaultThreshold; 0 turns the decomposition off
	Skip      []string // as FourBit's
	declines  declined.Log
}

// NewInt8 returns the plugin with Lightning's defaults.
func NewInt8(training bool) *Int8 {
	return &Int8{Training: training, Threshold: DefaultThreshold, Skip: slices.Clone(DefaultSkip)}
}

// Name is the spec string.
func (p *Int8) Name() string {
	if p.Training {
		return "int8-training"
	}
	return "int8"
}

// ConvertModule gives m int8 GEMMs if it is an eligible Linear, and
// quantizes and freezes its weight unless Training.
func (p *Int8) ConvertModule(path string, m nn.Module) error {
	if !(p.Threshold >= 0) {
		return fmt.Errorf("quant: %s threshold %v: must be 0 (no decomposition) or more", p.Name(), p.Threshold)
	}
	l, why, err := eligible(path, m, p.Skip, p)
	if l == nil {
		p.declines.Note(path, why)
		return err
	}
	if p.Training {
		l.GEMM = &linear8{owner: p}
		return nil
	}
	q, _ := QuantizeRows(l.Weight.Value, 0)
	freeze(l, &linear8{owner: p, w: q, deferred: deferredOf(l.Weight)}, q.Codes)
	return nil
}

// Declined says why ConvertModule left the Linear at path as it was (the
// precision.ConversionReporter role).
func (p *Int8) Declined(path string) (string, bool) { return p.declines.Why(path) }

// linear8 is the arithmetic of an Int8 Linear; w is the frozen weight of
// "int8", nil for "int8-training".
type linear8 struct {
	owner    *Int8
	w        *RowWise
	deferred *deferred // the frozen weight was built on shapes alone
}

// Materialize quantizes a frozen weight built on shapes alone from its
// initialiser (see deferred).
func (g *linear8) Materialize() {
	if g.deferred != nil {
		w := g.deferred.draw()
		g.w, _ = QuantizeRows(w, 0)
		tensor.Free(w)
		g.deferred = nil
	}
}

func (g *linear8) Linear(tp *autograd.Tape, x, w, b *autograd.Var) *autograd.Var {
	if g.w != nil {
		return frozenLinear(tp, x, b, g.w, func(x, bias *tensor.Tensor) *tensor.Tensor {
			y, _ := mixedLinear(x, g.w, bias, g.owner.Threshold)
			return y
		})
	}
	x, b = autocast(tp, x), autocast(tp, b)
	x2, bias := flatten(x, b)
	qw, _ := QuantizeRows(w.Value, 0)
	y, outliers := mixedLinear(x2, qw, bias, g.owner.Threshold)
	// The codes are not kept for backward, which quantizes w again to the
	// same codes: under FSDP w is gathered again anyway, and keeping them
	// would hold a copy of every weight between the passes (as FP8 does).
	qw.Free()
	return tp.RecordInputs(unflatten(y, x), func(dy *tensor.Tensor) []*tensor.Tensor {
		dy2 := dy.Reshape(-1, dy.Dim(-1))
		qw, _ := QuantizeRows(w.Value, 0)
		dx, db := inputGrads(dy2, x, b, qw)
		qw.Free()
		var dw *tensor.Tensor
		if w.RequiresGrad() {
			dw = weightGradInt8(dy2, x2, outliers)
		}
		return []*tensor.Tensor{dx, dw, db}
	}, x, w, b)
}

// Frozen offers a frozen int8 weight's codes for sharding, on whole rows
// (each row has its absmax); "int8-training" holds none.
func (g *linear8) Frozen() []nn.Frozen {
	if g.w == nil {
		return nil
	}
	return []nn.Frozen{{Name: "codes", Value: &g.w.Codes, Block: g.w.Codes.Dim(1)}}
}

func (g *linear8) installer() plugin   { return g.owner }
func (g *linear8) base() nn.LinearGEMM { return nil }

// frozenLinear records y = x·wᵀ + b for a weight w that gets no gradient:
// forward computes y from x, flattened to a matrix, and b, both cast as
// tp.Linear casts its inputs. Backward dequantizes w again for the input
// gradient.
func frozenLinear(tp *autograd.Tape, x, b *autograd.Var, w Weight, forward func(x, bias *tensor.Tensor) *tensor.Tensor) *autograd.Var {
	x, b = autocast(tp, x), autocast(tp, b)
	y := forward(flatten(x, b))
	return tp.RecordInputs(unflatten(y, x), func(dy *tensor.Tensor) []*tensor.Tensor {
		dx, db := inputGrads(dy.Reshape(-1, dy.Dim(-1)), x, b, w)
		return []*tensor.Tensor{dx, db}
	}, x, b)
}

// inputGrads returns the gradients of x and b from dy [rows, out]: dy·w
// with w dequantized to x's dtype, and dy summed over rows (nil for a
// Var that needs none).
func inputGrads(dy *tensor.Tensor, x, b *autograd.Var, w Weight) (dx, db *tensor.Tensor) {
	if x.RequiresGrad() {
		deq := w.Dequantize(x.Value.DType())
		dx = tensor.MatMul(dy, deq, false, false).Reshape(x.Value.Shape()...)
		tensor.Free(deq)
	}
	if b != nil && b.RequiresGrad() {
		db = tensor.ReduceBroadcast(dy, b.Value.Shape(), 1, dy.DType())
	}
	return dx, db
}

// autocast casts v to the dtype the tape's autocast gives linear's
// floating inputs; without autocast (or for nil) it returns v.
func autocast(tp *autograd.Tape, v *autograd.Var) *autograd.Var {
	if tp.Caster == nil || v == nil || !v.Value.DType().IsFloat() {
		return v
	}
	return tp.Cast(v, tp.Caster.CastInput(autograd.OpLinear, v.Value.DType()))
}

// flatten returns x's value as a matrix [rows, in], and b's value (nil
// without a bias).
func flatten(x, b *autograd.Var) (x2, bias *tensor.Tensor) {
	if b != nil {
		bias = b.Value
	}
	return x.Value.Reshape(-1, x.Value.Dim(-1)), bias
}

// unflatten gives y [rows, out] the leading axes of x, in place: the tape
// releases a recorded result's own storage, which a view would not have.
func unflatten(y *tensor.Tensor, x *autograd.Var) *tensor.Tensor {
	shape := x.Value.Shape()
	y.SetShape(append(slices.Clone(shape[:len(shape)-1]), y.Dim(-1))...)
	return y
}

// plugin is what the GEMMs of this package know of the plugin that
// installed them.
type plugin interface{ Name() string }

// layer is a LinearGEMM of this package.
type layer interface {
	nn.LinearGEMM
	installer() plugin
	base() nn.LinearGEMM // the GEMM it wraps (LoRA's); nil for none
}

// layers yields g, if it is a GEMM of this package, and the GEMMs of
// this package it wraps, outermost first.
func layers(g nn.LinearGEMM) iter.Seq[layer] {
	return func(yield func(layer) bool) {
		for {
			l, ok := g.(layer)
			if !ok || !yield(l) {
				return
			}
			g = l.base()
		}
	}
}

// installedBy reports whether owner has installed one of g's layers.
func installedBy(g nn.LinearGEMM, owner plugin) bool {
	for l := range layers(g) {
		if l.installer() == owner {
			return true
		}
	}
	return false
}

// WeightOf returns the quantized weight that a plugin of this package
// holds for l, if any.
func WeightOf(l *nn.Linear) (Weight, bool) {
	for g := range layers(l.GEMM) {
		switch g := g.(type) {
		case *linear4:
			return g.q, true
		case *linear8:
			if g.w != nil {
				return g.w, true
			}
		}
	}
	return nil, false
}

// eligible returns m as a Linear that owner should convert, or nil when m
// is not a Linear or owner has converted it already (converting twice
// changes nothing), or nil and why (after the path) when its path matches
// a pattern of skip. A Linear whose arithmetic or weight another plugin
// has replaced is an error wrapping nn.ErrGEMMReplaced: a quantizer must
// come before LoRA, and only one may replace a Linear.
func eligible(path string, m nn.Module, skip []string, owner plugin) (l *nn.Linear, declined string, err error) {
	l, ok := m.(*nn.Linear)
	if !ok || installedBy(l.GEMM, owner) {
		return nil, "", nil
	}
	if pattern, err := match(skip, path); pattern != "" || err != nil {
		if pattern != "" {
			declined = fmt.Sprintf("is skipped: Skip pattern %q keeps it in float", pattern)
		}
		return nil, declined, err
	}
	if l.GEMM != nil || l.Weight == nil {
		return nil, "", fmt.Errorf("quant: %s cannot convert %q: %w by %T (quantize before adding LoRA; one plugin replaces a Linear's arithmetic)", owner.Name(), path, nn.ErrGEMMReplaced, l.GEMM)
	}
	return l, "", nil
}

// deferred is a weight built on shapes alone (nn.Meta) with its
// initialiser, quantized when training materialises the model
// (fabric.Setup calls Materialize): drawn and quantized one weight at a
// time, so that no rank holds the float model whole. A plan never calls
// it and stays on shapes.
type deferred struct {
	init  autograd.Initializer
	shape []int
}

// deferredOf is w's deferred weight, nil unless w has a shape alone and
// an initialiser.
func deferredOf(w *autograd.Var) *deferred {
	if !w.Value.IsMeta() || w.Init == nil {
		return nil
	}
	return &deferred{init: w.Init, shape: slices.Clone(w.Value.Shape())}
}

// draw is the weight's initial value, float32 as nn builds it.
func (d *deferred) draw() *tensor.Tensor {
	return tensor.Generate(func(dst []float32) { d.init.Fill(dst, 0) }, d.shape...)
}

// freeze installs g, which holds the Linear's weight as codes, and drops
// the weight from l (see the package comment).
func freeze(l *nn.Linear, g nn.LinearGEMM, codes *tensor.Tensor) {
	tensor.Drop(l.Weight.Value) // quantized: the float weight is needed no more
	l.Weight.Value, l.Weight.Grad = codes, nil
	l.Weight, l.GEMM = nil, g
}

// matches reports whether one of patterns matches the module path p;
// patterns follow path.Match, with "." separating segments as "/" does.
func matches(patterns []string, p string) (bool, error) {
	pattern, err := match(patterns, p)
	return pattern != "", err
}

// match returns the first of patterns that matches the module path p, or "".
func match(patterns []string, p string) (string, error) {
	p = strings.ReplaceAll(p, ".", "/")
	for _, pat := range patterns {
		ok, err := path.Match(strings.ReplaceAll(pat, ".", "/"), p)
		if err != nil {
			return "", fmt.Errorf("quant: module pattern %q: %w", pat, err)
		}
		if ok {
			return pat, nil
		}
	}
	return "", nil
}

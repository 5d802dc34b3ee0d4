package nn

import (
	"errors"
	"math"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// Linear is y = x·Wᵀ + b with W [out, in].
type Linear struct {
	Weight *autograd.Var // [out, in]
	Bias   *autograd.Var // [out], nil when built without bias
	// GEMM, if set, computes the layer instead of the tape's Linear: the
	// hook through which precision plugins replace a layer's arithmetic
	// (FP8 GEMMs, quantized weights) while its parameters stay in place.
	GEMM LinearGEMM
	// Split, if set, is the tensor-parallel layout of a Linear that holds
	// one rank's share of Weight and Bias; it runs the GEMM (GEMM's, if
	// set) on that share.
	Split Split
}

// LinearGEMM computes x·wᵀ + b (b may be nil) on the tape.
type LinearGEMM interface {
	Linear(tp *autograd.Tape, x, w, b *autograd.Var) *autograd.Var
}

// A CastingGEMM is a LinearGEMM that casts its operands to dtypes of its
// own (FP8): Operands names them, forward (the input and the weight) and
// backward (the output's gradient).
type CastingGEMM interface {
	LinearGEMM
	Operands() (forward, backward dtype.DType)
}

// A FrozenGEMM is a LinearGEMM that holds its weight as constants no
// gradient reaches (quantized codes): a sharded strategy keeps a chunk of
// each on every rank and gathers it whole around every use, as it does a
// parameter.
type FrozenGEMM interface {
	LinearGEMM
	Frozen() []Frozen
}

// A ParamGEMM is a LinearGEMM that brings trainable parameters of its own
// (LoRA's adapters): the Linear lists them after its weight and bias, so
// that optimizers, strategies and checkpoints see them as the layer's.
type ParamGEMM interface {
	LinearGEMM
	Params() []Param
}

// Frozen is one constant of a FrozenGEMM: the field the GEMM reads it from
// at each use, which a strategy may replace, and the elements a split must
// keep together (a quantization block's).
type Frozen struct {
	Name  string // "codes"
	Value **tensor.Tensor
	Block int
}

// FrozenOf lists the constants of m's own weight, if m is a Linear whose
// GEMM holds them.
func FrozenOf(m Module) []Frozen {
	if l, ok := m.(*Linear); ok {
		if g, ok := l.GEMM.(FrozenGEMM); ok {
			return g.Frozen()
		}
	}
	return nil
}

// ErrGEMMReplaced is what a plugin's error wraps when it is asked to
// replace the arithmetic of a Linear whose GEMM another plugin has
// replaced already (one of the two would be lost); package precision
// reports it as a conflict between the two.
var ErrGEMMReplaced = errors.New("the Linear's arithmetic is already replaced")

// NewLinear initialises W and b uniformly in ±1/sqrt(in), as PyTorch does.
func NewLinear(init *Init, in, out int, bias bool) *Linear {
	bound := 1 / math.Sqrt(float64(in))
	l := &Linear{Weight: init.param(Uniform, -bound, bound, out, in)}
	if bias {
		l.Bias = init.param(Uniform, -bound, bound, out)
	}
	return l
}

func (l *Linear) Forward(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	x, exit := tp.Enter(l, x)
	if l.Split != nil {
		return exit(l.Split.Forward(tp, x, l.Bias, func(x, b *autograd.Var) *autograd.Var { return l.gemm(tp, x, b) }))
	}
	return exit(l.gemm(tp, x, l.Bias))
}

// ForwardGELU is tp.GELU(l.Forward(tp, x)), the GELU computed in the
// GEMM's epilogue (Tape.LinearGELU) unless a split or a GEMM of its own
// computes the layer.
func (l *Linear) ForwardGELU(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	if l.Split != nil || l.GEMM != nil {
		return tp.GELU(l.Forward(tp, x))
	}
	x, exit := tp.Enter(l, x)
	return tp.LinearGELU(x, l.Weight, l.Bias, exit)
}

// gemm is x·Wᵀ + b, computed by GEMM if set.
func (l *Linear) gemm(tp *autograd.Tape, x, b *autograd.Var) *autograd.Var {
	if l.GEMM != nil {
		return l.GEMM.Linear(tp, x, l.Weight, b)
	}
	return tp.Linear(x, l.Weight, b)
}

func (l *Linear) Params() []Param {
	own := params(Param{Name: "weight", Var: l.Weight}, Param{Name: "bias", Var: l.Bias})
	if g, ok := l.GEMM.(ParamGEMM); ok {
		return append(own, g.Params()...)
	}
	return own
}
func (l *Linear) Children() []Child { return nil }

// Embedding maps token ids to rows of Weight [num, dim].
type Embedding struct {
	Weight *autograd.Var
}

// NewEmbedding initialises the table from N(0, 1), as PyTorch does.
func NewEmbedding(init *Init, num, dim int) *Embedding {
	return &Embedding{Weight: init.param(Normal, 0, 1, num, dim)}
}

// Forward looks up ids, laid out with the given shape; the result is append(shape, dim).
func (e *Embedding) Forward(tp *autograd.Tape, ids []int, shape ...int) (*autograd.Var, error) {
	_, exit := tp.Enter(e, nil)
	out, err := tp.Embedding(e.Weight, ids, shape...)
	if err != nil {
		exit(nil)
		return nil, err
	}
	return exit(out), nil
}

func (e *Embedding) Params() []Param   { return params(Param{Name: "weight", Var: e.Weight}) }
func (e *Embedding) Children() []Child { return nil }

// LayerNorm normalises the last axis (biased variance) with an affine map.
type LayerNorm struct {
	Weight, Bias *autograd.Var // [dim]
	Eps          float64       // 1e-5
}

// NewLayerNorm starts with weight 1 and bias 0, as PyTorch does.
func NewLayerNorm(init *Init, dim int) *LayerNorm {
	return &LayerNorm{Weight: init.param(Const, 1, 0, dim), Bias: init.param(Const, 0, 0, dim), Eps: 1e-5}
}

func (n *LayerNorm) Forward(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	x, exit := tp.Enter(n, x)
	return exit(tp.LayerNorm(x, n.Weight, n.Bias, n.Eps))
}

func (n *LayerNorm) Params() []Param {
	return params(Param{Name: "weight", Var: n.Weight}, Param{Name: "bias", Var: n.Bias})
}
func (n *LayerNorm) Children() []Child { return nil }

// RMSNorm scales the last axis by its reciprocal root mean square, then by
// Weight (Llama's norm: no mean subtracted, no bias).
type RMSNorm struct {
	Weight *autograd.Var // [dim]
	Eps    float64       // 1e-5
}

// NewRMSNorm starts with weight 1, as HF's LlamaRMSNorm does.
func NewRMSNorm(init *Init, dim int, eps float64) *RMSNorm {
	return &RMSNorm{Weight: init.param(Const, 1, 0, dim), Eps: eps}
}

func (n *RMSNorm) Forward(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	x, exit := tp.Enter(n, x)
	return exit(tp.RMSNorm(x, n.Weight, n.Eps))
}

func (n *RMSNorm) Params() []Param   { return params(Param{Name: "weight", Var: n.Weight}) }
func (n *RMSNorm) Children() []Child { return nil }

// Conv2d is a 2-D cross-correlation with square stride and zero padding.
type Conv2d struct {
	Weight      *autograd.Var // [out, in, k, k]
	Bias        *autograd.Var // [out]
	Stride, Pad int
}

// NewConv2d initialises like PyTorch: uniform in ±1/sqrt(in·k·k).
func NewConv2d(init *Init, in, out, k, stride, pad int) *Conv2d {
	bound := 1 / math.Sqrt(float64(in*k*k))
	return &Conv2d{Weight: init.param(Uniform, -bound, bound, out, in, k, k), Bias: init.param(Uniform, -bound, bound, out), Stride: stride, Pad: pad}
}

func (c *Conv2d) Forward(tp *autograd.Tape, x *autograd.Var) *autograd.Var {
	x, exit := tp.Enter(c, x)
	return exit(tp.Conv2d(x, c.Weight, c.Bias, c.Stride, c.Pad))
}

func (c *Conv2d) Params() []Param {
	return params(Param{Name: "weight", Var: c.Weight}, Param{Name: "bias", Var: c.Bias})
}
func (c *Conv2d) Children() []Child { return nil }

// GELU and ReLU are parameter-free activations.
type (
	GELU struct{}
	ReLU struct{}
)

func (GELU) Forward(tp *autograd.Tape, x *autograd.Var) *autograd.Var { return tp.GELU(x) }
func (ReLU) Forward(tp *autograd.Tape, x *autograd.Var) *autograd.Var { return tp.ReLU(x) }

func (GELU) Params() []Param   { return nil }
func (GELU) Children() []Child { return nil }
func (ReLU) Params() []Param   { return nil }
func (ReLU) Children() []Child { return nil }

// params lists ps, skipping absent (nil) ones such as a missing bias.
func params(ps ...Param) []Param {
	out := ps[:0]
	for _, p := range ps {
		if p.Var != nil {
			out = append(out, p)
		}
	}
	return out
}

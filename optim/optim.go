// Package optim updates parameters from their gradients: SGD and AdamW with
// PyTorch's single-tensor algorithms, op for op.
package optim

import (
	"errors"
	"fmt"
	"math"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim/lowbit"
	"github.com/weftml/weft/tensor"
)

// Optimizer steps a fixed set of parameters.
type Optimizer interface {
	// Step updates every parameter that has a gradient.
	Step()
	// ZeroGrad drops the gradients (PyTorch's set_to_none).
	ZeroGrad()
	// Params lists the parameters the optimizer updates.
	Params() []nn.NamedParam
	// SetParams replaces them before the first step: a sharding strategy
	// hands the optimizer this rank's chunks.
	SetParams([]nn.NamedParam)
}

// SGD is plain stochastic gradient descent: p = p - lr·g.
type SGD struct {
	LR     float64
	params []nn.NamedParam
}

func NewSGD(params []nn.NamedParam, lr float64) *SGD { return &SGD{LR: lr, params: params} }

func (o *SGD) Params() []nn.NamedParam     { return o.params }
func (o *SGD) SetParams(p []nn.NamedParam) { o.params = p }
func (o *SGD) ZeroGrad()                   { zeroGrad(o.params) }

func (o *SGD) Step() {
	for _, p := range o.params {
		if p.Var.Grad != nil {
			tensor.SGDStep(p.Var.Value, p.Var.Grad, o.LR)
		}
	}
}

// AdamWConfig holds AdamW's hyperparameters.
type AdamWConfig struct {
	LR           float64 // 3e-3
	Beta1, Beta2 float64 // 0.9, 0.95
	Eps          float64 // 1e-8
	WeightDecay  float64 // 0.1, decoupled
	// StateDType stores the moments in this dtype; Invalid (the zero
	// value) keeps each parameter's own dtype, as PyTorch does.
	StateDType dtype.DType
	// StateFormat, if set, keeps the moments as low-bit codes with a
	// float32 scale a block, as bitsandbytes' AdamW8bit or torchao's
	// AdamW4bit and AdamWFp8 do (see AdamState); StateDType is then
	// unused.
	StateFormat *lowbit.Format
	// StochasticRound, if set, rounds the new values of bfloat16
	// parameters stochastically, as torchao's AdamW with
	// bf16_stochastic_round=True does (tensor.AdamWStep); nil rounds them
	// to nearest even.
	StochasticRound *StochasticRound
}

// StochasticRound places each parameter in the stream of random bits its
// stochastic rounding draws: the element at index i of parameter k of
// the model rounds, at optimizer step t, with word i of Philox stream
// (t, k) under key Seed (philox.Uint16s), i its index in the whole
// parameter, so that ranks updating chunks of a parameter, or
// tensor-parallel shares of it, draw the bits one device does and a run
// resumed at step t draws those of an uninterrupted one.
type StochasticRound struct {
	Seed uint64 // the run's seed
	// Origin places the parameter at path; nil takes its index in the
	// optimizer's parameters, whole.
	Origin func(path string) Origin
}

// Origin is where the elements an optimizer holds of a parameter lie in
// the model's.
type Origin struct {
	Index int // the parameter's in the model's parameters
	// Offset is the index of the first element the optimizer holds in
	// the parameter (a sharded optimizer's chunk's).
	Offset int
	// Runs, for a tensor-parallel share, give its elements' indices in
	// the whole parameter (tensor.StochasticBits); nil for a whole one.
	Runs []tensor.WordRun
}

// bits are the random bits of the update at step of the parameter at
// path, the i-th the optimizer holds.
func (r *StochasticRound) bits(path string, i, step int) *tensor.StochasticBits {
	o := Origin{Index: i}
	if r.Origin != nil {
		o = r.Origin(path)
	}
	return &tensor.StochasticBits{
		Key:    [2]uint32{uint32(r.Seed), uint32(r.Seed >> 32)},
		Stream: [2]uint32{uint32(step), uint32(o.Index)},
		First:  uint64(o.Offset),
		Runs:   o.Runs,
	}
}

// check names the first hyperparameter out of its range: a learning
// rate of 0 trains nothing, and a negative or NaN one is a typo.
func (c AdamWConfig) check() error {
	switch {
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return fmt.Errorf("learning rate %v: want a positive number (3e-3)", c.LR)
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		return fmt.Errorf("beta1 %v: want 0 <= beta1 < 1 (0.9)", c.Beta1)
	case !(c.Beta2 >= 0 && c.Beta2 < 1):
		return fmt.Errorf("beta2 %v: want 0 <= beta2 < 1 (0.95)", c.Beta2)
	case !(c.Eps >= 0):
		return fmt.Errorf("eps %v: want a number >= 0 (1e-8)", c.Eps)
	case math.IsNaN(c.WeightDecay) || math.IsInf(c.WeightDecay, 0):
		return fmt.Errorf("weight decay %v: want a finite number (0.1)", c.WeightDecay)
	}
	return nil
}

// AdamW is Adam with decoupled weight decay.
type AdamW struct {
	AdamWConfig
	params []nn.NamedParam
	state  map[string]*AdamState
	// elems are the parameters whose state covers only their first
	// elements (SetStateElems).
	elems map[string]int
}

// AdamState is one parameter's step count and moments.
type AdamState struct {
	Step     int
	ExpAvg   *tensor.Tensor // m
	ExpAvgSq *tensor.Tensor // v
	// ExpAvgScale and ExpAvgSqScale are set when the moments are low-bit
	// (AdamWConfig.StateFormat): ExpAvg and ExpAvgSq then hold codes,
	// tensors of the format's CodeDType and CodeShape, and these the
	// float32 scale of each block, [Format.Blocks(n)]. A moment is its
	// code's value times its block's scale.
	ExpAvgScale, ExpAvgSqScale *tensor.Tensor
}

// Quantized reports whether the moments are low-bit codes.
func (s *AdamState) Quantized() bool { return s.ExpAvgScale != nil }

func NewAdamW(params []nn.NamedParam, cfg AdamWConfig) (*AdamW, error) {
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("optim: AdamW: %w", err)
	}
	return &AdamW{AdamWConfig: cfg, params: params, state: map[string]*AdamState{}}, nil
}

func (o *AdamW) Params() []nn.NamedParam     { return o.params }
func (o *AdamW) SetParams(p []nn.NamedParam) { o.params = p }
func (o *AdamW) ZeroGrad()                   { zeroGrad(o.params) }

// State returns the state of the parameter at path, nil before its first step.
func (o *AdamW) State(path string) *AdamState { return o.state[path] }

// SetState replaces the state of the parameter at path (resuming from a
// checkpoint); the moments must have the parameter's shape.
func (o *AdamW) SetState(path string, st *AdamState) error {
	for _, p := range o.params {
		if p.Path != path {
			continue
		}
		like := o.stateLike(p)
		if o.StateFormat == nil && (!st.ExpAvg.SameShape(like) || !st.ExpAvgSq.SameShape(like)) || st.Step < 0 {
			return fmt.Errorf("optim: state for %s has shape %v, the parameter %v", path, st.ExpAvg.Shape(), like.Shape())
		}
		if err := o.checkFormat(st, like); err != nil {
			return fmt.Errorf("optim: state for %s: %w", path, err)
		}
		o.state[path] = st
		return nil
	}
	return fmt.Errorf("optim: no parameter %s to restore state for", path)
}

func (o *AdamW) Step() {
	for i, p := range o.params {
		if p.Var.Grad == nil {
			continue
		}
		st := o.state[p.Path]
		if st == nil {
			st = o.newState(o.stateLike(p))
			o.state[p.Path] = st
		}
		value, grad := p.Var.Value, p.Var.Grad
		n, part := o.elems[p.Path]
		if part {
			value, grad = value.Flat(0, n), grad.Flat(0, n)
		}
		st.Step++
		t := float64(st.Step)
		s := tensor.AdamWScalars{
			Decay:       1 - o.LR*o.WeightDecay,
			Lerp:        1 - o.Beta1,
			Beta2:       o.Beta2,
			OneMinusB2:  1 - o.Beta2,
			BC2Sqrt:     math.Sqrt(1 - math.Pow(o.Beta2, t)),
			Eps:         o.Eps,
			NegStepSize: -o.LR / (1 - math.Pow(o.Beta1, t)),
		}
		if o.StochasticRound != nil {
			s.Stochastic = o.StochasticRound.bits(p.Path, i, st.Step)
		}
		if st.Quantized() {
			if o.StateFormat.Torchao {
				s.Torchao = o.torchaoScalars(st.Step)
			}
			tensor.AdamWLowBitStep(value, grad, tensor.LowBitMoments{
				M: st.ExpAvg, V: st.ExpAvgSq, MScale: st.ExpAvgScale, VScale: st.ExpAvgSqScale,
				MCodec: o.StateFormat.M, VCodec: o.StateFormat.V,
			}, s)
		} else {
			tensor.AdamWStep(value, grad, st.ExpAvg, st.ExpAvgSq, s)
		}
		if part {
			tensor.FreeView(value)
			tensor.FreeView(grad)
		}
	}
}

// torchaoScalars are the constants of torchao's step t (lr a float32
// tensor, the β powers torch.pow of float32s).
func (o *AdamW) torchaoScalars(step int) *tensor.TorchaoScalars {
	t := float64(step)
	bc := func(beta float64) float32 { return 1 - float32(math.Pow(float64(float32(beta)), t)) }
	lr := float32(o.LR)
	return &tensor.TorchaoScalars{
		LR: lr, LRDecay: lr * float32(o.WeightDecay), BC1: bc(o.Beta1),
		BC2Sqrt: float32(math.Sqrt(float64(bc(o.Beta2)))),
		W1:      float32(1 - o.Beta1), W2: float32(1 - o.Beta2), Eps: float32(o.Eps),
	}
}

// newState is the zero state of a parameter of value v: moments in the
// state dtype, or the format's codes of a fresh moment with scales 0.
func (o *AdamW) newState(v *tensor.Tensor) *AdamState {
	shape := v.Shape()
	if f := o.StateFormat; f != nil {
		codes := f.CodeShape(shape)
		st := &AdamState{ExpAvg: tensor.New(f.CodeDType, codes...), ExpAvgSq: tensor.New(f.CodeDType, codes...)}
		fillBytes(st.ExpAvg.Data(), f.M.Zero())
		fillBytes(st.ExpAvgSq.Data(), f.V.Zero())
		blocks := f.Blocks(v.Len())
		st.ExpAvgScale, st.ExpAvgSqScale = tensor.New(dtype.F32, blocks), tensor.New(dtype.F32, blocks)
		return st
	}
	dt := o.StateDType
	if dt == dtype.Invalid {
		dt = v.DType()
	}
	return &AdamState{ExpAvg: tensor.New(dt, shape...), ExpAvgSq: tensor.New(dt, shape...)}
}

func fillBytes(b []byte, c byte) {
	for i := range b {
		b[i] = c
	}
}

// checkFormat says how st, the state of a parameter of shape like, is not
// in the format o keeps: low-bit codes and their scales, or float moments.
func (o *AdamW) checkFormat(st *AdamState, like *tensor.Tensor) error {
	f := o.StateFormat
	if f == nil {
		if st.Quantized() {
			return errors.New("low-bit moments, where this AdamW keeps them in a float dtype")
		}
		return nil
	}
	codes, blocks := tensor.Meta(f.CodeDType, f.CodeShape(like.Shape())...), f.Blocks(like.Len())
	switch {
	case !st.Quantized() || st.ExpAvgSqScale == nil:
		return fmt.Errorf("moments in %s, where this AdamW keeps %s", st.ExpAvg.DType(), f)
	case st.ExpAvg.DType() != f.CodeDType || st.ExpAvgSq.DType() != f.CodeDType || !st.ExpAvg.SameShape(codes) || !st.ExpAvgSq.SameShape(codes):
		return fmt.Errorf("codes %v and %v, want %s%v (%s)", st.ExpAvg, st.ExpAvgSq, f.CodeDType, codes.Shape(), f)
	case st.ExpAvgScale.DType() != dtype.F32 || st.ExpAvgSqScale.DType() != dtype.F32 ||
		st.ExpAvgScale.Len() != blocks || st.ExpAvgSqScale.Len() != blocks:
		return fmt.Errorf("scales %v and %v, want float32[%d] (%s)", st.ExpAvgScale, st.ExpAvgSqScale, blocks, f)
	}
	return nil
}

// SetStateElems keeps the state of the parameter at path for its first n
// elements only, 1-D, and steps those alone: a sharded chunk whose
// elements past n are padding (zero, with zero gradients, which AdamW
// would leave zero), so that its low-bit state holds no block of padding.
func (o *AdamW) SetStateElems(path string, n int) {
	if o.elems == nil {
		o.elems = map[string]int{}
	}
	o.elems[path] = n
}

// stateLike is a meta tensor of the shape of p's state.
func (o *AdamW) stateLike(p nn.NamedParam) *tensor.Tensor {
	if n, ok := o.elems[p.Path]; ok {
		return tensor.Meta(p.Var.Value.DType(), n)
	}
	return tensor.Meta(p.Var.Value.DType(), p.Var.Value.Shape()...)
}

// SetStateDType stores moments created from now on in dt (the precision's
// optimizer-state role).
func (o *AdamW) SetStateDType(dt dtype.DType) { o.StateDType = dt }

// SetStateFormat keeps moments created from now on in f (the precision's
// low-bit optimizer-state role).
func (o *AdamW) SetStateFormat(f *lowbit.Format) { o.StateFormat = f }

// SetStochasticRound rounds bfloat16 parameters' new values
// stochastically with r's bits (the precision's stochastic-rounding role).
func (o *AdamW) SetStochasticRound(r *StochasticRound) { o.StochasticRound = r }

// Underflow explains how an update of the parameter at path can produce
// NaN: an eps that rounds to zero in the moments' dtype makes sqrt(v)+eps
// zero wherever v is, and the update m/(sqrt(v)+eps) becomes 0/0 or m/0.
func (o *AdamW) Underflow(path string) error {
	st := o.state[path]
	if st == nil || o.Eps <= 0 || st.Quantized() {
		return nil
	}
	if dt := st.ExpAvgSq.DType(); dt.Bits() <= 16 && dt.Round(float32(o.Eps)) == 0 {
		return fmt.Errorf("AdamW eps=%g underflows to 0 in %s, so sqrt(v)+eps is 0 wherever v underflowed or a gradient was 0, and m/(sqrt(v)+eps) is NaN or inf", o.Eps, dt)
	}
	return nil
}

// zeroGrad drops the gradients, returning their storage to the tensor
// pool for the next backward pass.
func zeroGrad(params []nn.NamedParam) {
	for _, p := range params {
		tensor.Free(p.Var.Grad)
		p.Var.Grad = nil
	}
}

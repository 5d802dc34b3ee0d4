// Package optim updates parameters from their gradients: SGD and AdamW with
// PyTorch's single-tensor algorithms, op for op.
package optim

import (
	"errors"
	"fmt"
	"math"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/dtype/dynamic"
	"github.com/weftml/weft/nn"
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
	// StateBlock, when positive, keeps the moments as 8-bit codes with a
	// float32 absmax a block of StateBlock elements (256), as
	// bitsandbytes' AdamW8bit does (see AdamState); StateDType is then
	// unused.
	StateBlock int
	// StochasticRound, if set, rounds the new values of bfloat16
	// parameters stochastically, as torchao's AdamW with
	// bf16_stochastic_round=True does (tensor.AdamWStep); nil rounds them
	// to nearest even.
	StochasticRound *StochasticRound
}

// StochasticRound places each parameter in the stream of random bits its
// stochastic rounding draws: the element at index i of parameter k of
// the model rounds, at optimizer step t, with word i of Philox stream
// (t, k) under key Seed (philox.Uint16s), so that ranks updating chunks
// of a parameter draw the bits one device does and a run resumed at step
// t draws those of an uninterrupted one.
type StochasticRound struct {
	Seed uint64 // the run's seed
	// Origin gives the parameter at path's index in the model's
	// parameters and the index in it of the first element the optimizer
	// holds (0, or a sharded optimizer's chunk's offset); nil takes its
	// index in the optimizer's parameters and offset 0.
	Origin func(path string) (index, offset int)
}

// bits are the random bits of the update at step of the parameter at
// path, the i-th the optimizer holds.
func (r *StochasticRound) bits(path string, i, step int) *tensor.StochasticBits {
	index, offset := i, 0
	if r.Origin != nil {
		index, offset = r.Origin(path)
	}
	return &tensor.StochasticBits{
		Key:    [2]uint32{uint32(r.Seed), uint32(r.Seed >> 32)},
		Stream: [2]uint32{uint32(step), uint32(index)},
		First:  uint64(offset),
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
	case c.StateBlock < 0:
		return fmt.Errorf("state block %d: want 0 (moments in a float dtype) or a block size (256)", c.StateBlock)
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
	// ExpAvgAbsmax and ExpAvgSqAbsmax are set when the moments are 8-bit
	// (AdamWConfig.StateBlock): ExpAvg and ExpAvgSq then hold one code a
	// element, raw bytes in int8 tensors of the parameter's shape (m's of
	// dynamic.Signed, v's of dynamic.Unsigned), and these the float32
	// absmax of each block, [dynamic.Blocks(n, StateBlock)]. A moment is
	// its code's value times its block's absmax.
	ExpAvgAbsmax, ExpAvgSqAbsmax *tensor.Tensor
}

// Quantized reports whether the moments are 8-bit codes.
func (s *AdamState) Quantized() bool { return s.ExpAvgAbsmax != nil }

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
		if !st.ExpAvg.SameShape(like) || !st.ExpAvgSq.SameShape(like) || st.Step < 0 {
			return fmt.Errorf("optim: state for %s has shape %v, the parameter %v", path, st.ExpAvg.Shape(), like.Shape())
		}
		if err := o.checkFormat(st, like.Len()); err != nil {
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
			tensor.AdamW8Step(value, grad, tensor.Moments8{
				M: st.ExpAvg, V: st.ExpAvgSq, MAbsmax: st.ExpAvgAbsmax, VAbsmax: st.ExpAvgSqAbsmax, Block: o.StateBlock,
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

// newState is the zero state of a parameter of value v: moments in the
// state dtype, or 8-bit codes of 0 with absmax 0.
func (o *AdamW) newState(v *tensor.Tensor) *AdamState {
	shape := v.Shape()
	if o.StateBlock > 0 {
		st := &AdamState{ExpAvg: tensor.New(dtype.I8, shape...), ExpAvgSq: tensor.New(dtype.I8, shape...)}
		fillBytes(st.ExpAvg.Data(), dynamic.Signed.Nearest(0))
		fillBytes(st.ExpAvgSq.Data(), dynamic.Unsigned.Nearest(0))
		blocks := dynamic.Blocks(v.Len(), o.StateBlock)
		st.ExpAvgAbsmax, st.ExpAvgSqAbsmax = tensor.New(dtype.F32, blocks), tensor.New(dtype.F32, blocks)
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

// checkFormat says how st, the state of a parameter of n elements, is not
// in the format o keeps: 8-bit codes and their absmax, or float moments.
func (o *AdamW) checkFormat(st *AdamState, n int) error {
	if o.StateBlock == 0 {
		if st.Quantized() {
			return errors.New("8-bit moments, where this AdamW keeps them in a float dtype")
		}
		return nil
	}
	blocks := dynamic.Blocks(n, o.StateBlock)
	switch {
	case !st.Quantized() || st.ExpAvgSqAbsmax == nil:
		return fmt.Errorf("moments in %s, where this AdamW keeps 8-bit codes in blocks of %d", st.ExpAvg.DType(), o.StateBlock)
	case st.ExpAvg.DType() != dtype.I8 || st.ExpAvgSq.DType() != dtype.I8:
		return fmt.Errorf("8-bit moments in %s and %s, want int8 codes", st.ExpAvg.DType(), st.ExpAvgSq.DType())
	case st.ExpAvgAbsmax.DType() != dtype.F32 || st.ExpAvgSqAbsmax.DType() != dtype.F32 ||
		st.ExpAvgAbsmax.Len() != blocks || st.ExpAvgSqAbsmax.Len() != blocks:
		return fmt.Errorf("absmax %v and %v, want float32[%d] (blocks of %d)", st.ExpAvgAbsmax, st.ExpAvgSqAbsmax, blocks, o.StateBlock)
	}
	return nil
}

// SetStateElems keeps the state of the parameter at path for its first n
// elements only, 1-D, and steps those alone: a sharded chunk whose
// elements past n are padding (zero, with zero gradients, which AdamW
// would leave zero), so that its 8-bit state holds no block of padding.
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

// SetStateBlock keeps moments created from now on as 8-bit codes in
// blocks of block elements (the precision's 8-bit optimizer-state role).
func (o *AdamW) SetStateBlock(block int) { o.StateBlock = block }

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

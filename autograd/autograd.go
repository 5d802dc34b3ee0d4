// Package autograd is reverse-mode differentiation over tensor ops. A Tape
// records each op of a forward pass as a node holding its inputs and the
// function that maps the gradient of its output to the gradients of its
// inputs; Backward replays them in reverse.
package autograd

import (
	"errors"
	"fmt"
	"slices"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// Var is a tensor in a computation: a parameter, a constant input, or an
// op's result.
type Var struct {
	Value *tensor.Tensor
	// Grad is the accumulated gradient, in Value's dtype; nil until a
	// backward pass reaches this Var (and after the optimizer clears it).
	Grad *tensor.Tensor
	// Init, if set, draws the parameter's initial value by element range
	// (nn's constructors record an nn.ParamInit), so that a model built on
	// shapes alone can be filled in later, each rank its own chunk.
	Init         Initializer
	requiresGrad bool
}

// An Initializer writes elements [start, start+len(dst)) of a parameter's
// flat (row-major) initial value into dst.
type Initializer interface {
	Fill(dst []float32, start int)
}

// Param returns a leaf whose gradient is accumulated.
func Param(t *tensor.Tensor) *Var { return &Var{Value: t, requiresGrad: true} }

// Const returns a leaf that needs no gradient (inputs, targets).
func Const(t *tensor.Tensor) *Var { return &Var{Value: t} }

// Const is autograd.Const held by the tape, which reuses it the next pass
// (after Backward) rather than allocate: for a step's input batch.
func (tp *Tape) Const(t *tensor.Tensor) *Var {
	if tp.NoGrad {
		return Const(t)
	}
	n := tp.next()
	n.out.Value, n.borrowed = t, true
	return &n.out
}

// RequiresGrad reports whether gradients flow to v.
func (v *Var) RequiresGrad() bool { return v.requiresGrad }

// Freeze makes v a leaf no gradient reaches (a weight beside the adapters
// that train), dropping any it holds.
func (v *Var) Freeze() { v.requiresGrad, v.Grad = false, nil }

// Op names an operation for autocasting decisions.
type Op string

const (
	OpLinear       Op = "linear"
	OpMatMul       Op = "matmul"
	OpConv2d       Op = "conv2d"
	OpLayerNorm    Op = "layer_norm"
	OpSoftmax      Op = "softmax"
	OpCrossEntropy Op = "cross_entropy"
	OpAdd          Op = "add"
	OpMul          Op = "mul"
	OpGELU         Op = "gelu"
	OpReLU         Op = "relu"
	OpMaskedFill   Op = "masked_fill"
	OpEmbedding    Op = "embedding"
	OpRMSNorm      Op = "rms_norm"
	OpSiLU         Op = "silu"
	OpRotary       Op = "rotary"
)

// A Caster decides the dtype an op's floating inputs are cast to before it
// runs, as autocast does; returning the input's own dtype leaves it alone.
type Caster interface {
	CastInput(op Op, in dtype.DType) dtype.DType
}

// A Scoper opens the precision scope of one module (per-module precision
// policies): it may cast the module's input x at the boundary and switch
// the tape's Caster; exit casts the module's output for the enclosing
// scope and restores it.
type Scoper interface {
	EnterScope(tp *Tape, module any, x *Var) (in *Var, exit func(out *Var) *Var)
}

// A ScopeResumer is a Scoper whose scopes nest, so that how a module's
// scope opens depends on the scopes open around it. A checkpointed
// module's forward is recomputed in backward, after the pass's scopes have
// closed: Resume returns a Scoper that opens scopes as the receiver would
// now. A Scoper without it serves the recompute itself.
type ScopeResumer interface {
	Scoper
	Resume() Scoper
}

// Tape records one forward pass. Its zero value records ops and casts
// nothing.
type Tape struct {
	// Caster, if set, casts op inputs (autocast); nil runs every op in the
	// dtype of its inputs, promoting mixed inputs to the wider one.
	Caster Caster
	// Scoper, if set, gives modules their own precision scopes.
	Scoper Scoper
	// Recycle returns every op result's storage to the tensor pool once
	// Backward is past it (all its consumers are done), but the loss's,
	// which lasts until the next pass: read the values you need (logits)
	// before calling Backward. A result that nothing reads any more goes
	// back sooner, as the module that computed it returns (see Enter).
	Recycle bool
	// NoGrad stops recording for backward (inference, evaluation). With
	// Recycle, the results are kept on the tape for Reset to free: Reset
	// after each pass, having read what you need.
	NoGrad bool
	// Recompute, if set, selects the layers whose forward Checkpoint
	// recomputes in backward instead of keeping their activations.
	Recompute func(layer Layer) bool
	// Observe, if set, sees each op as the tape records it: the class its
	// inputs were autocast for ("" for an op that autocasts none: a cast,
	// a shape op, a Record op), its result and its inputs. A plan measures
	// a pass on meta tensors with it.
	Observe func(op Op, out *Var, in []*Var)
	// casting is the class of the op whose inputs autocast has cast, until
	// the op records its result.
	casting Op
	// observed holds the inputs Observe is shown.
	observed []*Var
	// recomputing marks the tape a checkpointed forward is recomputed on
	// (see Recomputing), whose input is in; replay is that tape, which
	// every recompute reuses.
	recomputing bool
	in          Var
	replay      *Tape
	// nodes are the ops of this pass, nodes[:used]; Reset keeps the nodes
	// for the next pass, so that a steady training loop allocates none.
	// The Vars the tape returned live in them: they are valid until the
	// next pass after Backward.
	nodes []*node
	used  int
	// dy is the gradient the running backward step received, and dyKept
	// what an input took of it as its own gradient (dy or a view of it).
	dy, dyKept *tensor.Tensor
	// err is a recomputed forward's backward error, which ends the replay.
	err error
	// loss is the value Backward left to the caller, freed when the next
	// pass starts.
	loss *tensor.Tensor
	// live is releaseSince's scratch, kept so that a pass allocates none.
	live []*tensor.Tensor
	// scopes are the module scopes open on a recycling tape, innermost
	// last, and leaves[d] the exit Enter hands out at depth d, made once,
	// so that entering a module allocates nothing.
	scopes []openScope
	leaves []func(*Var) *Var
}

// openScope is a module scope Enter opened: where its nodes start and the
// Scoper's exit.
type openScope struct {
	start int
	exit  func(*Var) *Var
}

// node is one op of a pass: its result, its inputs and what its backward
// needs from the forward pass. backward is nil for results no gradient
// flows through.
type node struct {
	out      Var
	in       [3]*Var
	backward func(tp *Tape, n *node, dy *tensor.Tensor)
	reads    reads             // the forward values backward reads
	saved    [2]*tensor.Tensor // LayerNorm's mean and rstd (see save)
	ints     [8]int            // axis, stride and padding, permutation ...
	flag     bool              // MatMul's transB
	scale    float64
	idx      []int // embedding rows, cross-entropy targets
	// custom and inputs are a Record op's backward and inputs.
	custom func(dy *tensor.Tensor) []*tensor.Tensor
	inputs []*Var
	// recorded marks a Record op's result, which may be a view of a tensor
	// the caller keeps: the tape releases only its storage.
	recorded bool
	// borrowed marks a caller's tensor (Const), which the tape never frees.
	borrowed bool
	// released marks a result whose storage went back to the pool before
	// backward, nothing reading it any more (see releaseSince); its
	// shape and dtype stay for backward.
	released bool
	// hook is an OnBackward function; such a node has no result.
	hook func() error
	// forward is a checkpointed layer's, which the node's backward
	// recomputes.
	forward recomputation
	// castFrom[i], if not nil, is the Var that in[i] was autocast from by
	// a cast made for this op alone (see linearInputs).
	castFrom [2]*Var
}

// gradTarget returns the Var input i's gradient goes to: the source of the
// cast in[i] came from, when this op made the cast, else in[i].
func (n *node) gradTarget(i int) *Var {
	if v := n.castFrom[i]; v != nil {
		return v
	}
	return n.in[i]
}

// reads names the forward values an op's backward reads, which the tape
// keeps until that backward has run, as PyTorch keeps what an op saves
// for backward: its result, its inputs by position. A value that no
// backward reads (an Add's inputs, a Linear's result) is freed once
// nothing else can reach it. Shapes and dtypes are always kept.
type reads uint8

const (
	readsOut reads = 1 << iota // the op's own result
	readsIn0                   // n.in[0]'s value
	readsIn1
	readsIn2
	readsEveryInput // a Record op's, however many inputs it has

	readsNone reads = 0
)

// record creates the node of an op's result (up to three inputs are kept
// in n.in) and, if any input needs a gradient, makes backward its
// backward step, which reads the forward values r names.
func (tp *Tape) record(value *tensor.Tensor, backward func(*Tape, *node, *tensor.Tensor), r reads, inputs ...*Var) *node {
	if tp.NoGrad && !tp.Recycle {
		return &node{out: Var{Value: value}}
	}
	n := tp.next()
	n.out.Value = value
	op := tp.casting
	tp.casting = ""
	if tp.Observe != nil {
		// A copy, so that inputs (often a caller's stack) never escapes.
		tp.observed = append(tp.observed[:0], inputs...)
		tp.Observe(op, &n.out, tp.observed)
	}
	if tp.NoGrad {
		return n
	}
	copy(n.in[:], inputs)
	for _, in := range inputs {
		if in != nil && in.requiresGrad {
			n.out.requiresGrad, n.backward, n.reads = true, backward, r
			break
		}
	}
	return n
}

// appendReads appends to live the values n's backward reads, none if it
// has no backward.
func (n *node) appendReads(live []*tensor.Tensor) []*tensor.Tensor {
	if n.backward == nil {
		return live
	}
	if n.reads&readsOut != 0 {
		live = append(live, n.out.Value)
	}
	inputs := n.in[:]
	if n.recorded {
		inputs = n.inputs
	}
	for i, in := range inputs {
		if in != nil && (n.reads&readsEveryInput != 0 || i < len(n.in) && n.reads&(readsIn0<<i) != 0) {
			live = append(live, in.Value)
		}
	}
	return live
}

// next returns the pass's next node, cleared, allocating only when the
// pass is longer than any before.
func (tp *Tape) next() *node {
	if tp.used == 0 && tp.loss != nil {
		tensor.Free(tp.loss)
		tp.loss = nil
	}
	if tp.used == len(tp.nodes) {
		tp.nodes = append(tp.nodes, new(node))
	}
	n := tp.nodes[tp.used]
	tp.used++
	n.freeSaved() // a pass that was Reset without Backward
	*n = node{}
	return n
}

// save keeps ts for n's backward, or frees them when n has none (no input
// needs a gradient, or NoGrad).
func (n *node) save(ts ...*tensor.Tensor) {
	if n.backward == nil {
		for _, t := range ts {
			tensor.Free(t)
		}
		return
	}
	copy(n.saved[:], ts)
}

// freeSaved frees what the forward pass saved for n's backward, once
// Backward is past n whether or not a gradient reached it.
func (n *node) freeSaved() {
	for i, t := range n.saved {
		tensor.Free(t)
		n.saved[i] = nil
	}
}

// Record adds a custom op to the tape: value is its result, computed from
// inputs by the caller, and backward maps the result's gradient to one
// gradient per input (nil for none). Layers with their own arithmetic (an
// FP8 Linear) are built on it. The tape takes the gradients backward
// returns and recycles their storage once used: return fresh tensors, dy,
// or views of them. The tape keeps value and the inputs' values until
// backward has run; backward must read no other value the tape recorded.
func (tp *Tape) Record(value *tensor.Tensor, backward func(dy *tensor.Tensor) []*tensor.Tensor, inputs ...*Var) *Var {
	return tp.recordCustom(value, backward, readsOut|readsEveryInput, inputs)
}

// RecordInputs is Record for an op whose backward reads its inputs' values
// but not its result (a Linear's): the tape can then free the result once
// nothing else reads it, as PyTorch keeps only what an op saves.
func (tp *Tape) RecordInputs(value *tensor.Tensor, backward func(dy *tensor.Tensor) []*tensor.Tensor, inputs ...*Var) *Var {
	return tp.recordCustom(value, backward, readsEveryInput, inputs)
}

// RecordUnsaved is Record for an op whose backward reads no forward value,
// its inputs' and its result's shapes and dtypes aside (a collective, a
// move of data): the tape can then free those values before backward.
func (tp *Tape) RecordUnsaved(value *tensor.Tensor, backward func(dy *tensor.Tensor) []*tensor.Tensor, inputs ...*Var) *Var {
	return tp.recordCustom(value, backward, readsNone, inputs)
}

func (tp *Tape) recordCustom(value *tensor.Tensor, backward func(dy *tensor.Tensor) []*tensor.Tensor, r reads, inputs []*Var) *Var {
	n := tp.record(value, customBackward, r, inputs...)
	n.custom, n.inputs, n.recorded = backward, inputs, true
	return &n.out
}

func customBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	for i, g := range n.custom(dy) {
		if g != nil {
			tp.accumulate(n.inputs[i], g)
		}
	}
}

// accumulate adds g to v's gradient, cast to v's dtype as PyTorch's engine
// casts a gradient to the dtype of the tensor it belongs to. The tape owns
// g from here: it becomes v's gradient, or its storage goes back to the
// pool once added. A gradient is never shared: the first input that takes
// the op's dy keeps it, later ones get a copy.
func (tp *Tape) accumulate(v *Var, g *tensor.Tensor) {
	if v == nil || !v.requiresGrad {
		tp.discard(g)
		return
	}
	if c := g.To(v.Value.DType()); c != g {
		tp.discard(g)
		g = c
	}
	if v.Grad == nil {
		if tensor.SameStorage(g, tp.dy) {
			if tp.dyKept != nil {
				g = g.Clone()
			} else {
				tp.dyKept = g
			}
		}
		v.Grad = g
		return
	}
	v.Grad.AddInPlace(g)
	tp.discard(g)
}

// discard recycles a gradient the tape is done with; the op's dy is
// recycled after its backward unless an input took it.
func (tp *Tape) discard(g *tensor.Tensor) {
	if !tensor.SameStorage(g, tp.dy) {
		tensor.Discard(g)
	}
}

// OnBackward records fn at this point of the pass: Backward calls it when
// its replay reaches the point, after the backward of every op recorded
// since and before that of any op recorded earlier, whether or not a
// gradient flows there. FSDP hangs a module's parameter gather on the
// point after its forward and its gradient reduce-scatter on the point
// before. A pass that records nothing (NoGrad) ignores fn; an error from
// fn ends Backward with it.
func (tp *Tape) OnBackward(fn func() error) {
	if !tp.NoGrad {
		tp.next().hook = fn
	}
}

// ErrNotScalar is returned by Backward for a loss with more than one element.
var ErrNotScalar = errors.New("autograd: backward needs a scalar loss")

// Backward computes d loss / d v for every recorded v that needs it,
// seeding with 1, accumulates into the leaves' Grad, and clears the tape.
func (tp *Tape) Backward(loss *Var) error {
	return tp.BackwardScaled(loss, 1)
}

// BackwardScaled is Backward seeded with scale instead of 1 (loss scaling).
// The gradients of intermediate results are recycled as soon as their op's
// backward is done.
func (tp *Tape) BackwardScaled(loss *Var, scale float64) error {
	defer tp.forget()
	if loss.Value.Len() != 1 {
		return fmt.Errorf("%w: shape %v", ErrNotScalar, loss.Value.Shape())
	}
	if !loss.requiresGrad {
		return errors.New("autograd: the loss does not depend on any parameter")
	}
	loss.Grad = tensor.New(loss.Value.DType(), loss.Value.Shape()...)
	loss.Grad.Fill(scale)
	return tp.backward(loss)
}

// backward replays the recorded ops in reverse from the gradients their
// results hold. With Recycle, every result is freed once Backward is past
// it but loss's (nil for none), which the tape keeps until the next pass.
// A hook's error, or one from the backward of a recomputed forward, ends
// the replay.
func (tp *Tape) backward(loss *Var) error {
	for _, n := range slices.Backward(tp.nodes[:tp.used]) {
		if n.hook != nil {
			if err := n.hook(); err != nil {
				return err
			}
			continue
		}
		if tp.err != nil {
			err := tp.err
			tp.err = nil
			return err
		}
		if dy := n.out.Grad; dy != nil && n.backward != nil {
			n.out.Grad = nil // intermediate gradients are not kept
			tp.dy = dy
			n.backward(tp, n, dy)
			switch {
			case tp.dyKept == nil:
				tensor.Discard(dy)
			case tp.dyKept != dy:
				tensor.FreeView(dy) // an input kept a view of dy's storage
			}
			tp.dy, tp.dyKept = nil, nil
		}
		n.freeSaved()
		switch {
		case !tp.Recycle:
		case &n.out != loss:
			recycle(n)
		case !n.recorded:
			tp.loss = loss.Value
		}
	}
	err := tp.err
	tp.err = nil
	return err
}

// recycle frees a node's result once Backward is past it. A Record op's
// result may be a view of a tensor the caller keeps, so only its storage
// is released.
func recycle(n *node) {
	switch {
	case n.borrowed:
	case n.recorded:
		tensor.Release(n.out.Value)
	default:
		tensor.Free(n.out.Value)
		n.out.Value = nil
	}
}

// Reset abandons the pass without running its backward (an evaluation, a
// skipped step): with Recycle, its results go back to the tensor pool
// (read what you need first). Its nodes (and the Vars in them) serve the
// next pass.
func (tp *Tape) Reset() {
	if tp.Recycle {
		for _, n := range tp.nodes[:tp.used] {
			recycle(n)
		}
	}
	tp.forget()
}

// forget ends the pass; Backward has recycled what it had to.
func (tp *Tape) forget() {
	tp.used = 0
	clear(tp.scopes)
	tp.scopes = tp.scopes[:0]
}

// autocast returns x cast for op by the Caster, recording the cast so the
// gradient flows back in x's dtype.
func (tp *Tape) autocast(op Op, x *Var) *Var {
	if x == nil {
		return x
	}
	tp.casting = ""
	x = tp.Cast(x, tp.castFor(op, x.Value.DType()))
	tp.casting = op
	return x
}

// castFor is the dtype the Caster gives op's input of dtype in.
func (tp *Tape) castFor(op Op, in dtype.DType) dtype.DType {
	if tp.Caster == nil || !in.IsFloat() {
		return in
	}
	return tp.Caster.CastInput(op, in)
}

// Enter opens module's precision scope, returning x as the module should
// see it and the function its output must pass through on the way out.
// Without a Scoper both are identities. x may be nil (index inputs). Call
// the exit once, as the module returns: scopes close innermost first.
//
// On a tape that recycles, leaving the scope frees what nothing can read
// any more of the results recorded inside it: nothing outside a module
// refers to its intermediates but through its output, as PyTorch's
// reference counting would find. An evaluation (NoGrad) keeps only the
// output (and what shares its storage), so that it holds a module's
// activations only while it runs; a pass for backward keeps the values
// backward reads too (see releaseSince).
func (tp *Tape) Enter(module any, x *Var) (*Var, func(*Var) *Var) {
	start := tp.used
	in, exit := x, identity
	if tp.Scoper != nil {
		in, exit = tp.Scoper.EnterScope(tp, module, x)
	}
	if !tp.Recycle {
		return in, exit
	}
	d := len(tp.scopes)
	tp.scopes = append(tp.scopes, openScope{start, exit})
	if d == len(tp.leaves) {
		tp.leaves = append(tp.leaves, func(out *Var) *Var { return tp.leave(d, out) })
	}
	return in, tp.leaves[d]
}

// leave closes the scope open at depth d, and any a failed forward left
// open inside it. A scope already closed (the pass ended) passes out on.
func (tp *Tape) leave(d int, out *Var) *Var {
	if d >= len(tp.scopes) {
		return out
	}
	s := tp.scopes[d]
	clear(tp.scopes[d:])
	tp.scopes = tp.scopes[:d]
	if tp.NoGrad {
		out = s.exit(out)
		tp.dropSince(s.start, out)
		return out
	}
	// Released before the Scoper's exit, so that a Scoper measuring the
	// tape at its exit (a plan's) sees what the module leaves; what the
	// exit records itself (a cast of out) is the enclosing module's.
	tp.releaseSince(s.start, out)
	return s.exit(out)
}

// releaseSince returns to the pool the storage of the results recorded
// from start on that nothing can read any more: all but out's (and what
// shares its storage) and the values the recorded ops' backward steps
// read. Their nodes stay for backward, which reads only their shapes and
// dtypes; views and borrowed inputs own no storage to release.
func (tp *Tape) releaseSince(start int, out *Var) {
	nodes := tp.nodes[start:tp.used]
	live := tp.live[:0]
	if out != nil {
		live = append(live, out.Value)
	}
	for _, n := range nodes {
		live = n.appendReads(live)
	}
	for _, n := range nodes {
		v := n.out.Value
		if n.released || n.borrowed || v == nil || v.IsView() || sharesStorage(live, v) {
			continue
		}
		tensor.Release(v)
		n.released = true
	}
	clear(live)
	tp.live = live[:0]
}

// sharesStorage reports whether t shows the storage of any of ts.
func sharesStorage(ts []*tensor.Tensor, t *tensor.Tensor) bool {
	for _, u := range ts {
		if tensor.SameStorage(u, t) {
			return true
		}
	}
	return false
}

// dropSince recycles the results of the NoGrad nodes recorded from start
// on, keeping out's node and those whose results show its storage.
func (tp *Tape) dropSince(start int, out *Var) {
	kept := start
	for i := start; i < tp.used; i++ {
		n := tp.nodes[i]
		if &n.out == out || (out != nil && n.out.Value != nil && tensor.SameStorage(n.out.Value, out.Value)) {
			tp.nodes[kept], tp.nodes[i] = n, tp.nodes[kept]
			kept++
			continue
		}
		recycle(n)
		*n = node{}
	}
	tp.used = kept
}

func identity(v *Var) *Var { return v }

// Cast returns x converted to dt (rounding to nearest even); its gradient
// is converted back to x's dtype.
func (tp *Tape) Cast(x *Var, dt dtype.DType) *Var {
	if x.Value.DType() == dt {
		return x
	}
	return &tp.record(x.Value.To(dt), castBackward, readsNone, x).out
}

func castBackward(tp *Tape, n *node, dy *tensor.Tensor) { tp.accumulate(n.in[0], dy) }

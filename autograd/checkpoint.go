package autograd

import (
	"slices"

	"github.com/weftml/weft/tensor"
)

// A Layer is a module whose forward maps one Var to another, as a
// transformer block's does: the unit Checkpoint recomputes.
type Layer interface {
	Forward(tp *Tape, x *Var) *Var
}

// recomputation is what a checkpointed layer's backward needs to run its
// forward again as it first ran: the layer and the autocast and scopes it
// started in.
type recomputation struct {
	layer  Layer
	caster Caster
	scoper Scoper
}

// Checkpoint returns layer.Forward(tp, x). When the tape's Recompute
// selects layer, the pass keeps only x and the result, as
// torch.utils.checkpoint does: the forward's other results and saved
// tensors are freed as soon as it returns, and backward runs it again (in
// the autocast and precision scopes it first ran in, so that it computes
// the same values) to take the gradients of x and of the parameters it
// reads. A layer whose forward reads no other state than x and its
// parameters, and keeps nothing it records, can be checkpointed.
func (tp *Tape) Checkpoint(layer Layer, x *Var) *Var {
	if tp.NoGrad || tp.Recompute == nil || !tp.Recompute(layer) {
		return layer.Forward(tp, x)
	}
	r := recomputation{layer: layer, caster: tp.Caster, scoper: tp.Scoper}
	if s, ok := tp.Scoper.(ScopeResumer); ok {
		r.scoper = s.Resume()
	}
	start := tp.used
	y := layer.Forward(tp, x)
	tp.keepOnly(start, x, y, r)
	return y
}

// keepOnly drops the ops the forward recorded from start on but y's: the
// node of y becomes the one op of the checkpointed forward, and the nodes
// whose results show y's storage stay (without a backward) to free it in
// turn. A y the forward did not compute (x itself, a parameter) leaves
// everything recorded.
func (tp *Tape) keepOnly(start int, x, y *Var, r recomputation) {
	if !slices.ContainsFunc(tp.nodes[start:tp.used], func(n *node) bool { return &n.out == y }) {
		return
	}
	kept := start
	for i := start; i < tp.used; i++ {
		n := tp.nodes[i]
		n.custom, n.inputs, n.in, n.backward = nil, nil, [3]*Var{}, nil
		tensor.Free(n.saved[0])
		tensor.Free(n.saved[1])
		n.saved = [2]*tensor.Tensor{}
		switch {
		case &n.out == y:
			if y.requiresGrad { // the recompute reads x
				n.in[0], n.backward, n.reads, n.forward = x, checkpointBackward, readsIn0, r
			}
		case n.out.Value != nil && tensor.SameStorage(n.out.Value, y.Value):
		default:
			if tp.Recycle {
				recycle(n)
			}
			*n = node{}
			continue
		}
		tp.nodes[kept], tp.nodes[i] = n, tp.nodes[kept]
		kept++
	}
	tp.used = kept
}

// checkpointBackward recomputes a checkpointed forward on the replay tape
// and runs its backward from dy. The recomputed x starts with x's gradient
// so far, so that x's gradient sums in the order it would without the
// checkpoint; the parameters take theirs directly.
func checkpointBackward(tp *Tape, n *node, dy *tensor.Tensor) {
	if tp.replay == nil {
		tp.replay = &Tape{recomputing: true}
	}
	sub, r, x := tp.replay, n.forward, n.in[0]
	sub.Caster, sub.Scoper, sub.Recycle = r.caster, r.scoper, tp.Recycle
	var xr *Var
	if x != nil {
		sub.in = Var{Value: x.Value, Grad: x.Grad, requiresGrad: x.requiresGrad}
		xr, x.Grad = &sub.in, nil
	}
	y := r.layer.Forward(sub, xr)
	y.Grad = dy // the replay tape frees dy, or keeps it as a gradient
	if err := sub.backward(nil); err != nil {
		tp.err = err // for the replay of tp to return
	}
	sub.Reset()
	if x != nil {
		x.Grad, sub.in = xr.Grad, Var{}
	}
	tp.dyKept = dy
}

// Recomputing reports whether tp is recomputing a checkpointed forward in
// backward. What a forward records besides the tape (FP8 amax histories)
// must not be recorded again, and casts must use the state the first
// forward used.
func (tp *Tape) Recomputing() bool { return tp.recomputing }

// Retained is what the recorded pass holds for backward: the number and
// bytes of the op results and saved tensors on the tape, not counting
// views and borrowed inputs (Const), whose storage the tape does not own,
// nor results already released (see Enter).
func (tp *Tape) Retained() (tensors int, bytes int64) {
	tp.eachRetained(func(t *tensor.Tensor) {
		tensors++
		bytes += int64(t.Bytes())
	})
	return tensors, bytes
}

// RetainedPool is Retained's bytes as the tensor pool counts them, each
// buffer rounded up to its size class (tensor.PoolBytes): the same on a
// pass over meta tensors as on one over real ones.
func (tp *Tape) RetainedPool() (bytes int64) {
	tp.eachRetained(func(t *tensor.Tensor) { bytes += tensor.PoolBytes(t.DType(), t.Len()) })
	return bytes
}

func (tp *Tape) eachRetained(fn func(*tensor.Tensor)) {
	for _, n := range tp.nodes[:tp.used] {
		out := n.out.Value
		if n.borrowed || n.released {
			out = nil
		}
		for _, t := range [...]*tensor.Tensor{out, n.saved[0], n.saved[1]} {
			if t != nil && !t.IsView() {
				fn(t)
			}
		}
	}
}

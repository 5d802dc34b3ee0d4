package autograd

import (
	"slices"

	"github.com/weftml/weft/tensor"
)

// recomputation is what a checkpointed module's backward needs to run its
// forward again as it first ran: the function and the autocast and scopes
// it started in.
type recomputation struct {
	fn     func(*Tape, *Var) *Var
	caster Caster
	scoper Scoper
}

// Checkpoint runs fn(tp, x), the forward pass of module, and returns its
// result. When the tape's Recompute selects module, the pass keeps only
// x and the result, as torch.utils.checkpoint does: fn's other results and
// saved tensors are freed as soon as it returns, and backward runs fn again
// (in the autocast and precision scopes it first ran in, so that it
// computes the same values) to take the gradients of x and of the
// parameters fn reads. A module whose forward reads no other state than
// x and its parameters can be checkpointed; fn must not keep what it
// records.
func (tp *Tape) Checkpoint(module any, x *Var, fn func(tp *Tape, x *Var) *Var) *Var {
	if tp.NoGrad || tp.Recompute == nil || !tp.Recompute(module) {
		return fn(tp, x)
	}
	r := &recomputation{fn: fn, caster: tp.Caster, scoper: tp.Scoper}
	if s, ok := tp.Scoper.(ScopeResumer); ok {
		r.scoper = s.Resume()
	}
	start := tp.used
	y := fn(tp, x)
	tp.forget(start, x, y, r)
	return y
}

// forget drops the ops fn recorded from start on but y's: the node of y
// becomes the one op of the checkpointed forward, and the nodes whose
// results show y's storage stay (without a backward) to free it in turn.
// A y that fn did not compute (x itself, a parameter) leaves everything
// recorded.
func (tp *Tape) forget(start int, x, y *Var, r *recomputation) {
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
			if y.requiresGrad {
				n.in[0], n.backward, n.forward = x, checkpointBackward, r
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
		xr = &Var{Value: x.Value, Grad: x.Grad, requiresGrad: x.requiresGrad}
		x.Grad = nil
	}
	y := r.fn(sub, xr)
	y.Grad = dy // the replay tape frees dy, or keeps it as a gradient
	sub.backward(nil)
	sub.Reset()
	if x != nil {
		x.Grad = xr.Grad
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
// views and borrowed inputs (Const), whose storage the tape does not own.
func (tp *Tape) Retained() (tensors int, bytes int64) {
	for _, n := range tp.nodes[:tp.used] {
		out := n.out.Value
		if n.borrowed {
			out = nil
		}
		for _, t := range [...]*tensor.Tensor{out, n.saved[0], n.saved[1]} {
			if t != nil && !t.IsView() {
				tensors++
				bytes += int64(t.Bytes())
			}
		}
	}
	return tensors, bytes
}

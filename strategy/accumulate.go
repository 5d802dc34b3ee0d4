package strategy

import "github.com/weftml/weft/tensor"

// Gradient accumulation: several backwards (micro-batches) before one
// optimizer step. With sync on, every backward reduces its own gradients
// and SyncGrads adds the result to what the step's earlier backwards
// reduced, in the reduced form: whole under ddp and zero1, this rank's
// chunk under zero2 and fsdp, so sharded gradients stay sharded. With sync
// off the gradients stay local and unreduced, and the next backward with
// sync on reduces their sum.

// SetGradientSync turns the reduction of gradients in backward on (the
// default) or off, as FSDP2's set_requires_gradient_sync does. Off, each
// rank keeps its own unreduced gradients, which later backwards add to,
// and the first backward with sync on reduces their sum once: under ddp
// and zero1, whose gradients are whole on every rank anyway, that saves
// every all-reduce but the last at no memory cost; under zero2 and fsdp
// each rank then holds the gradients of the whole model unsharded (the
// parameters' bytes once more, Size times what their chunks take) from
// the first such backward until that reduction.
func (r *Rank) SetGradientSync(on bool) { r.noSync = !on }

// BeginBackward sets aside the gradients that the step's earlier
// backwards reduced, so that this backward's reduction covers its own
// gradients only; SyncGrads adds them back. Unreduced gradients (of a
// backward with sync off) stay where they are, for this backward to add
// to. The fabric calls it before every backward.
func (r *Rank) BeginBackward() {
	for i := range r.shards {
		s := &r.shards[i]
		if s.held == nil {
			continue
		}
		switch {
		case r.Info.Sharding.Gradients:
			s.local.Grad = nil
		case r.Info.Sharding.OptimizerState: // both gradients view held
			if s.full.Grad != s.held {
				tensor.FreeView(s.full.Grad)
			}
			tensor.FreeView(s.local.Grad)
			s.full.Grad, s.local.Grad = nil, nil
		default:
			s.full.Grad = nil
		}
		s.acc, s.held = s.held, nil
	}
}

// accumulated takes the shard's reduction of this backward plus what the
// step's earlier backwards reduced, either alone if the other is missing
// (a parameter this micro-batch did not use).
func (s *shard) accumulated() *tensor.Tensor {
	g, acc := s.reduced, s.acc
	s.reduced, s.acc = nil, nil
	switch {
	case acc == nil:
		return g
	case g == nil:
		return acc
	}
	g.AddInPlace(acc)
	tensor.Free(acc)
	return g
}

// forgetAccumulated ends a step's accumulation: the optimizer has freed
// the installed gradients; what is still set aside (a step taken after a
// backward with sync off) is freed here.
func (r *Rank) forgetAccumulated() {
	for i := range r.shards {
		s := &r.shards[i]
		tensor.Free(s.acc)
		s.acc, s.held = nil, nil
	}
}

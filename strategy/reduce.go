package strategy

import (
	"context"
	"fmt"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// reduce starts reducing the gradients of the given parameters to their
// mean over ranks: all-reduced in full (DDP, ZeRO-1) or reduce-scattered
// so that each rank keeps only its chunk's (ZeRO-2, FSDP). The gradients
// leave the parameters; SyncGrads puts the results in place.
func (r *Rank) reduce(ctx context.Context, params []int) {
	if r.noSync || r.comm.Size() == 1 && !r.Info.Sharding.OptimizerState {
		return
	}
	var grads []*tensor.Tensor
	var which []int
	for _, i := range params {
		if r.shards[i].full == nil {
			continue // a frozen weight
		}
		if g := r.shards[i].full.Grad; g != nil {
			grads, which = append(grads, g), append(which, i)
			r.shards[i].full.Grad = nil
		}
	}
	if len(grads) == 0 {
		return
	}
	r.link.start(ctx, func(ctx context.Context, c comm.Communicator) error {
		for k, i := range which {
			if err := r.reduceOne(ctx, c, &r.shards[i], grads[k]); err != nil {
				return fmt.Errorf("strategy %s: reducing the gradient of %s: %w", r.Info.Name, r.path(i), err)
			}
		}
		return nil
	})
}

// reduceOne reduces g, which it owns, into s.reduced, in s.reduceIn if
// set; under hsdp the shard group's reduce-scatter is then summed over
// the replicas.
func (r *Rank) reduceOne(ctx context.Context, c comm.Communicator, s *shard, g *tensor.Tensor) error {
	inv := 1 / float64(r.comm.Size())
	own := g.DType()
	if s.reduceIn != dtype.Invalid && s.reduceIn != own {
		cast := g.To(s.reduceIn)
		tensor.Discard(g)
		g = cast
	}
	dt := g.DType()
	var out *tensor.Tensor
	if r.Info.Sharding.Gradients {
		padded := pad(g, s.chunk*c.Size())
		tensor.Free(g)
		out = tensor.New(dt, s.chunk)
		err := comm.ReduceScatterTensor(ctx, c, padded, out, comm.Sum)
		tensor.Free(padded)
		if err != nil {
			tensor.Free(out)
			return fmt.Errorf("reduce-scatter: %w", err)
		}
		if r.replicas != nil {
			if err := comm.AllReduceTensor(ctx, r.replicas, out, comm.Sum); err != nil {
				tensor.Free(out)
				return fmt.Errorf("all-reduce across shard groups: %w", err)
			}
		}
	} else {
		out = g
		if r.Info.Sharding.OptimizerState && s.n != s.chunk*c.Size() { // the chunk's gradient views it
			out = pad(g, s.chunk*c.Size())
			tensor.Free(g)
		}
		if err := comm.AllReduceTensor(ctx, c, out, comm.Sum); err != nil {
			tensor.Free(out)
			return fmt.Errorf("all-reduce: %w", err)
		}
	}
	out.ScaleInPlace(inv)
	if dt != own { // the mean, rounded back once
		back := out.To(own)
		tensor.Free(out)
		out = back
	}
	if s.reduced == nil {
		s.reduced = out
		return nil
	}
	s.reduced.AddInPlace(out) // a parameter that is also used outside its unit
	tensor.Free(out)
	return nil
}

// SyncGrads finishes the reductions of a backward pass: it reduces the
// gradients no unit has (the root's), waits for every reduction and
// gives each parameter, or its chunk, the mean gradient over ranks plus
// what the step's earlier backwards reduced (see BeginBackward); with
// gradient sync off it reduces nothing. Ranks must hold equal shares of
// the global batch.
func (r *Rank) SyncGrads(ctx context.Context) error {
	r.step = ctx
	all := make([]int, len(r.shards))
	for i := range all {
		all[i] = i
	}
	r.reduce(ctx, all)
	if err := r.link.drain(); err != nil || r.noSync {
		return err
	}
	for i := range r.shards {
		s := &r.shards[i]
		g := s.accumulated()
		if g == nil {
			continue
		}
		s.held = g
		switch {
		case r.Info.Sharding.Gradients:
			s.local.Grad = g
		case r.Info.Sharding.OptimizerState:
			s.full.Grad = view(g, s.n, s.shape)
			s.local.Grad = g.Flat(r.group.Rank()*s.chunk, s.chunk)
		default:
			s.full.Grad = g
		}
	}
	return nil
}

package strategy

import (
	"context"
	"fmt"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// Rank is one rank's share of a data-parallel strategy. Every parameter
// is split flat into Size equal chunks (the last padded with zeros); rank
// r owns chunk r. What a rank keeps of each parameter, its gradient and its
// optimizer state follows the strategy's Sharding: a sharded optimizer
// updates only the rank's chunk, through a Var of its own.
type Rank struct {
	Info   Info
	comm   comm.Communicator
	params []nn.NamedParam
	shards []shard
	// format gives a parameter's all-gather wire format (FP8 and its
	// scale); nil or ok false: its storage dtype.
	format func(path string) (dt dtype.DType, scale float32, ok bool)
	// gathered counts the parameter bytes this rank sent in all-gathers,
	// by wire dtype.
	gathered map[dtype.DType]int64
}

// shard is one parameter's chunk on this rank.
type shard struct {
	full  *autograd.Var // the model's parameter
	local *autograd.Var // the chunk the optimizer updates (sharded optimizers)
	shape []int
	n     int // elements of the parameter
	chunk int // elements per rank, padded
}

// NewRank prepares rank c.Rank() of strategy info over the model's
// parameters, which must be identical on every rank.
// format, if not nil, picks the wire format of each parameter's all-gathers.
func NewRank(info Info, c comm.Communicator, params []nn.NamedParam, format func(path string) (dtype.DType, float32, bool)) (*Rank, error) {
	r := &Rank{Info: info, comm: c, params: params, format: format, gathered: map[dtype.DType]int64{}}
	size, me := c.Size(), c.Rank()
	for _, p := range params {
		v := p.Var.Value
		if v.DType().Bits() < 8 {
			return nil, fmt.Errorf("strategy %s: %s is %s, which has no byte-addressable shards", info.Name, p.Path, v.DType())
		}
		n := v.Len()
		chunk := (n + size - 1) / size
		s := shard{full: p.Var, shape: v.Shape(), n: n, chunk: chunk}
		if info.Sharding.OptimizerState {
			s.local = autograd.Param(slice(v, me*chunk, chunk))
		}
		r.shards = append(r.shards, s)
	}
	return r, nil
}

// OptimizerParams are what this rank's optimizer updates: the full
// parameters, or this rank's chunks of them.
func (r *Rank) OptimizerParams() []nn.NamedParam {
	if !r.Info.Sharding.OptimizerState {
		return r.params
	}
	out := make([]nn.NamedParam, len(r.shards))
	for i, s := range r.shards {
		out[i] = nn.NamedParam{Path: r.params[i].Path, Var: s.local}
	}
	return out
}

// Shard returns this rank's chunk of a tensor shaped like the i-th
// parameter (1-D, zero-padded), as a sharded optimizer holds its state.
func (r *Rank) Shard(i int, t *tensor.Tensor) *tensor.Tensor {
	s := r.shards[i]
	return slice(t, r.comm.Rank()*s.chunk, s.chunk)
}

// Reshard re-cuts this rank's chunks from the full parameters, after the
// parameters were replaced (loaded from a checkpoint).
func (r *Rank) Reshard() {
	for i := range r.shards {
		if s := &r.shards[i]; s.local != nil {
			s.local.Value = r.Shard(i, s.full.Value)
		}
	}
}

// Comm is the rank's communicator.
func (r *Rank) Comm() comm.Communicator { return r.comm }

// BeforeForward gathers the full parameters that AfterStep freed (ZeRO-3:
// between steps a rank holds only its chunks).
func (r *Rank) BeforeForward(ctx context.Context) error {
	if !r.Info.Sharding.Parameters {
		return nil
	}
	for i := range r.shards {
		if r.shards[i].full.Value != nil {
			continue // still whole since the last gather (evaluation, checkpointing)
		}
		if err := r.gather(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// Gathered returns the parameter bytes this rank has sent in all-gathers,
// by wire dtype (FP8 weights 1 byte each, their scales under float32).
func (r *Rank) Gathered() map[dtype.DType]int64 { return r.gathered }

// SyncGrads makes every rank's gradient the mean over ranks: all-reduced in
// full (DDP, ZeRO-1) or reduce-scattered so each rank keeps only its chunk's
// (ZeRO-2, ZeRO-3). Ranks must hold equal shares of the global batch.
func (r *Rank) SyncGrads(ctx context.Context) error {
	if r.comm.Size() == 1 && !r.Info.Sharding.OptimizerState {
		return nil
	}
	inv := 1 / float64(r.comm.Size())
	for i := range r.shards {
		s := &r.shards[i]
		g := s.full.Grad
		if g == nil {
			continue
		}
		dt := g.DType()
		padded := pad(g, s.chunk*r.comm.Size())
		tensor.Free(g) // padded replaces it
		s.full.Grad = nil
		if r.Info.Sharding.Gradients {
			chunk := tensor.New(dt, s.chunk)
			err := r.comm.ReduceScatter(ctx, padded.Data(), chunk.Data(), dt, comm.Sum)
			tensor.Free(padded)
			if err != nil {
				return fmt.Errorf("strategy %s: reduce-scatter %s: %w", r.Info.Name, r.params[i].Path, err)
			}
			chunk.ScaleInPlace(inv)
			s.local.Grad = chunk
			continue
		}
		if err := r.comm.AllReduce(ctx, padded.Data(), dt, comm.Sum); err != nil {
			return fmt.Errorf("strategy %s: all-reduce %s: %w", r.Info.Name, r.params[i].Path, err)
		}
		padded.ScaleInPlace(inv)
		if s.local != nil { // ZeRO-1: the chunk's gradient is a view of the full one
			s.local.Grad = padded.Flat(r.comm.Rank()*s.chunk, s.chunk)
		}
		s.full.Grad = padded.Flat(0, s.n).Reshape(s.shape...)
	}
	return nil
}

// Any reports whether any rank's found is true (a non-finite gradient),
// so that all ranks skip a step together.
func (r *Rank) Any(found bool) (bool, error) {
	flag := tensor.New(dtype.F32, 1)
	if found {
		flag.Fill(1)
	}
	if err := r.comm.AllReduce(context.Background(), flag.Data(), dtype.F32, comm.Max); err != nil {
		return false, fmt.Errorf("strategy %s: agreeing on inf/NaN: %w", r.Info.Name, err)
	}
	return flag.Float32s()[0] != 0, nil
}

// Max returns the largest over ranks of v (an FP8 amax); NaN if any is.
func (r *Rank) Max(v float32) (float32, error) {
	t := tensor.FromFloat32([]float32{v}, 1)
	if err := r.comm.AllReduce(context.Background(), t.Data(), dtype.F32, comm.Max); err != nil {
		return 0, fmt.Errorf("strategy %s: amax: %w", r.Info.Name, err)
	}
	return t.Float32s()[0], nil
}

// Sum returns the sum over ranks of v (a squared gradient norm of chunks).
func (r *Rank) Sum(v float64) (float64, error) {
	s, err := comm.SumFloat64(context.Background(), r.comm, v)
	if err != nil {
		return 0, fmt.Errorf("strategy %s: %w", r.Info.Name, err)
	}
	return s, nil
}

// AfterStep brings every rank's updated chunks back into the parameters:
// an all-gather (ZeRO-1, ZeRO-2); ZeRO-3 instead frees the full
// parameters until the next forward gathers them.
func (r *Rank) AfterStep(ctx context.Context) error {
	if !r.Info.Sharding.OptimizerState {
		return nil
	}
	for i := range r.shards {
		s := &r.shards[i]
		s.full.Grad = nil
		if r.Info.Sharding.Parameters {
			s.full.Value = nil
			continue
		}
		if err := r.gather(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// gather rebuilds parameter i from every rank's chunk, sent in its storage
// dtype or, when its format asks, as FP8 bytes with the sender's scale.
func (r *Rank) gather(ctx context.Context, i int) error {
	s := &r.shards[i]
	gather := r.gatherAs
	if r.format != nil {
		if dt, scale, ok := r.format(r.params[i].Path); ok {
			gather = func(ctx context.Context, chunk *tensor.Tensor) (*tensor.Tensor, error) {
				return r.gatherScaled(ctx, chunk, dt, scale)
			}
		}
	}
	full, err := gather(ctx, s.local.Value)
	if err != nil {
		return fmt.Errorf("strategy %s: all-gather of %s: %w", r.Info.Name, r.params[i].Path, err)
	}
	s.full.Value = slice(full, 0, s.n).Reshape(s.shape...)
	return nil
}

// gatherAs all-gathers chunk as it is stored.
func (r *Rank) gatherAs(ctx context.Context, chunk *tensor.Tensor) (*tensor.Tensor, error) {
	all := tensor.New(chunk.DType(), chunk.Len()*r.comm.Size())
	if err := r.comm.AllGather(ctx, chunk.Data(), all.Data()); err != nil {
		return nil, err
	}
	r.gathered[chunk.DType()] += int64(len(chunk.Data()))
	return all, nil
}

// gatherScaled all-gathers chunk·scale cast (saturating) to dt, with every
// rank's scale, and returns the values decoded and unscaled, in chunk's dtype.
func (r *Rank) gatherScaled(ctx context.Context, chunk *tensor.Tensor, dt dtype.DType, scale float32) (*tensor.Tensor, error) {
	scales, err := r.gatherAs(ctx, tensor.FromFloat32([]float32{scale}, 1))
	if err != nil {
		return nil, err
	}
	codes, err := r.gatherAs(ctx, tensor.Scale(chunk.To(dtype.F32), float64(scale)).ToSat(dt))
	if err != nil {
		return nil, err
	}
	vals, per := codes.Float32s(), chunk.Len()
	for rank, sc := range scales.Float32s() {
		for j := rank * per; j < (rank+1)*per; j++ {
			vals[j] /= sc
		}
	}
	return tensor.FromFloat32(vals, len(vals)).To(chunk.DType()), nil
}

// Bytes is what this rank holds now for parameters, gradients and the
// given optimizer state, for the memory report.
func (r *Rank) Bytes() (params, grads int64) {
	for _, s := range r.shards {
		switch {
		case s.full.Value != nil:
			params += int64(s.full.Value.Bytes())
		case s.local != nil:
			params += int64(s.local.Value.Bytes())
		}
		switch {
		case s.full.Grad != nil: // a chunk's gradient, if any, is a view of it
			grads += int64(s.full.Grad.Bytes())
		case s.local != nil && s.local.Grad != nil:
			grads += int64(s.local.Grad.Bytes())
		}
	}
	return params, grads
}

// slice returns a 1-D copy of n elements of t's flat storage from start,
// zero-padded past t's end.
func slice(t *tensor.Tensor, start, n int) *tensor.Tensor {
	out := tensor.New(t.DType(), n)
	size := t.DType().Bits() / 8
	if start < t.Len() {
		copy(out.Data(), t.Data()[start*size:min(t.Len(), start+n)*size])
	}
	return out
}

// pad returns t flattened to n elements, zero-padded.
func pad(t *tensor.Tensor, n int) *tensor.Tensor { return slice(t, 0, n) }

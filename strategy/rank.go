package strategy

import (
	"context"
	"fmt"
	"maps"
	"sync"

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
//
// The model's modules are grouped into units (Options.Units). Gradients
// are reduced per unit, as soon as the unit's backward is done, while the
// backward of the units before it goes on; under FSDP a unit's parameters
// exist whole only from just before its forward to just after it, and
// again for its backward, the next unit's gather running while the
// current one computes.
type Rank struct {
	Info Info
	opts Options
	comm comm.Communicator // every data-parallel rank
	// group is the ranks that split the state (comm itself but under
	// hsdp, its shard group), over which every collective of the link
	// runs; replicas, under hsdp, the ranks holding the same chunks.
	group, replicas comm.Communicator
	link            link
	params          []nn.NamedParam
	// shards are the parameters', in params' order, then the frozen
	// weights' (FSDP), whose paths frozen lists.
	shards []shard
	frozen []string
	units  []unit
	unitOf map[any]int // a unit's module → its index in units
	root   unit        // the parameters outside every unit
	comms  Comms
	// step is the context of the running step (see stepContext).
	step context.Context
	// noSync leaves gradients unreduced (see SetGradientSync).
	noSync bool
	// gathered counts the parameter bytes this rank sent in all-gathers,
	// by wire dtype; the link's goroutines add to it.
	mu       sync.Mutex
	gathered map[dtype.DType]int64
	// recomputes says a forward of the model is checkpointed, whose
	// recompute in backward reads a unit's weights for the forward's GEMMs
	// again.
	recomputes bool
}

// Comms is what precision decides of a strategy's communication: FSDP's
// parameter all-gathers (its GatherQuantizer and GatherUser roles) and
// the dtype gradients are reduced in (GradReducer); the zero value
// gathers every parameter and reduces every gradient in its own dtype and
// decodes nothing.
type Comms struct {
	// Format picks a parameter's wire dtype and the scale it is cast with
	// (FP8 weights; 0: a plain cast, which the receivers cast back to its
	// storage dtype); ok false: its storage dtype.
	Format func(path string) (dt dtype.DType, scale float32, ok bool)
	// Use offers a parameter's gathered codes, whole, cast with scale, and
	// this rank's chunk, to the plugin that computes with them as they are
	// (the weight then is never decoded); Drop tells it they are freed.
	Use  func(path string, codes, chunk *tensor.Tensor, scale float32) bool
	Drop func(path string)
	// Codec, if it returns one, gathers a parameter as the codes of its
	// plugin's block-scaled cast for the GEMMs of a pass: the forward's,
	// the backward's, or both (see comm.Codec). Drop tells the plugin
	// they are freed.
	Codec func(path string, gemms GEMMs) comm.Codec
	// Reduce picks the dtype a parameter's gradient is summed over ranks
	// in; ok false: its own.
	Reduce func(path string) (dt dtype.DType, ok bool)
}

// Options are the choices a strategy leaves to its user.
type Options struct {
	// Units picks the sharding units; nil is DefaultUnits.
	Units UnitFunc
	// KeepAfterForward keeps an FSDP unit's gathered parameters from its
	// forward to its backward instead of gathering them twice (FSDP2's
	// reshard_after_forward=False): less communication, more memory.
	KeepAfterForward bool
	// Hybrid is the shard and replica groups (comm.NewHybrid) of the
	// communicator of a Hybrid strategy (hsdp), which needs them; its
	// caller owns and closes them.
	Hybrid *comm.Hybrid
	// StateBlock, when positive, is the block of the optimizer's low-bit
	// state (the precision's; the fabric sets it): a strategy that shards
	// optimizer state then cuts every parameter in whole blocks counted
	// from its first element, so that a rank's chunk quantizes as those
	// elements do on one device, whatever the number of ranks.
	StateBlock int
}

// shard is one parameter's chunk on this rank.
type shard struct {
	full *autograd.Var // the model's parameter; nil for a frozen weight
	// slot is where the model reads the whole value: full.Value, or a
	// frozen weight's field in its GEMM (nn.Frozen).
	slot  **tensor.Tensor
	local *autograd.Var // the chunk the optimizer updates (sharded optimizers)
	dt    dtype.DType
	shape []int
	n     int // elements of the parameter
	chunk int // elements per rank, padded; a multiple of a frozen weight's block (Options.StateBlock's for a parameter)
	// wire is the format this pass's first gather of the parameter used,
	// which regathers for its backward and recompute reuse: an FP8 scale
	// may have moved since, and the values must be those of the forward.
	wire *wire
	// rounded says the whole value was gathered in a narrower format and
	// decoded (a plain cast's, FP8 codes): what the model computes with,
	// not the parameter, which Whole gathers exactly instead.
	rounded bool
	// codes are the parameter gathered in its FP8 wire format, which a
	// plugin computes with (Gathers.Use) while the whole value stays meta.
	codes *tensor.Tensor
	// coded says its plugin holds it whole as a Codec's codes (Comms.Codec).
	coded bool
	// reduceIn is the dtype its gradient is summed over ranks in (Invalid:
	// the gradient's own).
	reduceIn dtype.DType
	// reduced is the gradient a unit's reduction produced this pass (the
	// full mean, or this rank's chunk of it), written by the link's
	// goroutine and installed by SyncGrads once every reduction is done.
	reduced *tensor.Tensor
	// held is the reduced gradient SyncGrads installed (the storage the
	// parameter's or chunk's gradient shows), acc the one BeginBackward
	// set aside, which the next SyncGrads adds to its reduction's.
	held, acc *tensor.Tensor
}

// NewRank prepares rank c.Rank() of strategy info over m's parameters,
// which must be identical on every rank; comms says how they
// travel. Under FSDP the parameters are freed but for this rank's chunks.
func NewRank(info Info, c comm.Communicator, m nn.Module, comms Comms, opts Options) (*Rank, error) {
	r := &Rank{Info: info, opts: opts, comm: c, group: c, params: nn.Parameters(m), comms: comms, gathered: map[dtype.DType]int64{}}
	if info.Hybrid {
		h := opts.Hybrid
		if h == nil || h.Shard.Size()*h.Replica.Size() != c.Size() {
			return nil, fmt.Errorf("strategy %s needs its shard and replica groups of the %d ranks (comm.NewHybrid)", info.Name, c.Size())
		}
		r.group, r.replicas = h.Shard, h.Replica
	}
	r.link = link{c: r.group}
	size := r.group.Size()
	block := ParamBlock(info.Sharding, opts.StateBlock)
	for _, p := range r.params {
		v := p.Var.Value
		if v.DType().Bits() < 8 {
			return nil, fmt.Errorf("strategy %s: %s is %s, which has no byte-addressable shards", info.Name, p.Path, v.DType())
		}
		if v.IsMeta() && (!info.Sharding.Parameters || p.Var.Init == nil) {
			return nil, fmt.Errorf("strategy %s: %s has a shape and no values; only fsdp initialises parameters built on shapes alone (nn.Meta), and only those with an initialiser", info.Name, p.Path)
		}
		s := newShard(p.Var, &p.Var.Value, block, size)
		if comms.Reduce != nil {
			if dt, ok := comms.Reduce(p.Path); ok && dt != s.dt {
				s.reduceIn = dt
			}
		}
		r.shards = append(r.shards, s)
	}
	if info.Sharding.Parameters { // frozen weights are sharded too, after the parameters
		nn.Walk(m, func(path string, mod nn.Module) {
			for _, fz := range nn.FrozenOf(mod) {
				r.frozen = append(r.frozen, nn.Join(path, fz.Name))
				r.shards = append(r.shards, newShard(nil, fz.Value, fz.Block, size))
			}
		})
	}
	r.units, r.unitOf, r.root = findUnits(m, opts.Units, r.shards)
	if info.Sharding.OptimizerState {
		r.Reshard()
	}
	return r, nil
}

// path names shard i: its parameter's path, or its frozen weight's.
func (r *Rank) path(i int) string {
	if i < len(r.params) {
		return r.params[i].Path
	}
	return r.frozen[i-len(r.params)]
}

// whole reports whether the parameter is whole on this rank: its value, or
// the codes its plugin computes with.
func (s *shard) whole() bool { return !(*s.slot).IsMeta() || s.codes != nil || s.coded }

// newShard describes the value in slot (of parameter full, nil for a
// frozen weight) split over size ranks in chunks of whole blocks.
func newShard(full *autograd.Var, slot **tensor.Tensor, block, size int) shard {
	v := *slot
	n := v.Len()
	return shard{full: full, slot: slot, dt: v.DType(), shape: v.Shape(), n: n, chunk: Chunk(n, block, size)}
}

// OptimizerParams are what this rank's optimizer updates: the full
// parameters, or this rank's chunks of them.
func (r *Rank) OptimizerParams() []nn.NamedParam {
	if !r.Info.Sharding.OptimizerState {
		return r.params
	}
	out := make([]nn.NamedParam, len(r.params))
	for i, p := range r.params {
		out[i] = nn.NamedParam{Path: p.Path, Var: r.shards[i].local}
	}
	return out
}

// OptimizerOffset is the index, in its whole parameter, of the first
// element of OptimizerParams()[i]: this rank's chunk's offset, or 0 where
// the optimizer updates whole parameters.
func (r *Rank) OptimizerOffset(i int) int {
	if !r.Info.Sharding.OptimizerState {
		return 0
	}
	return r.group.Rank() * r.shards[i].chunk
}

// Shard returns this rank's chunk of a tensor shaped like the i-th
// parameter (1-D, zero-padded), as a sharded optimizer holds its state.
func (r *Rank) Shard(i int, t *tensor.Tensor) *tensor.Tensor {
	s := r.shards[i]
	return slice(t, r.group.Rank()*s.chunk, s.chunk)
}

// Part says which elements of the i-th parameter this rank's chunk holds:
// n from start, fewer than the chunk's length (every rank's) past the
// parameter's end, none in a chunk of padding alone.
func (r *Rank) Part(i int) (start, n, chunk int) {
	s := r.shards[i]
	start = min(r.group.Rank()*s.chunk, s.n)
	return start, min(s.chunk, s.n-start), s.chunk
}

// ShardBlocks returns this rank's share of t, which holds one value per
// block of block elements of the i-th parameter (an 8-bit moment's absmax;
// its chunks are whole blocks, Options.StateBlock), zero-padded.
func (r *Rank) ShardBlocks(i int, t *tensor.Tensor, block int) *tensor.Tensor {
	per := r.shards[i].chunk / block
	return slice(t, r.group.Rank()*per, per)
}

// Reshard re-cuts this rank's chunks from the whole parameters (at setup,
// and after they were replaced by a checkpoint's). ZeRO-1 and ZeRO-2
// chunks are views of the padded whole parameter, which the optimizer
// updates in place; FSDP keeps its chunks and frees the rest.
func (r *Rank) Reshard() {
	for i := range r.shards {
		s := &r.shards[i]
		if s.local == nil {
			s.local = autograd.Param(nil)
		}
		// The whole value's storage is freed (its header stays with
		// whoever built it, so a stale reference fails loudly).
		old := *s.slot
		if r.Info.Sharding.Parameters && old.IsMeta() && s.local.Value != nil {
			continue // cut before and replaced by nothing since (a checkpoint holds no frozen codes)
		}
		// The chunk cut before (none at setup) goes too: FSDP's own
		// storage, or the padded storage a ZeRO chunk views.
		prev := s.local.Value
		if r.Info.Sharding.Parameters {
			s.local.Value = r.chunk(i)
			*s.slot = tensor.Meta(s.dt, s.shape...)
			tensor.Drop(prev)
		} else {
			r.install(s, pad(old, s.chunk*r.group.Size()))
			if prev != nil {
				tensor.Discard(prev)
			}
		}
		tensor.Drop(old)
	}
}

// chunk is this rank's chunk of parameter i: cut from its value, or, for a
// parameter built on shapes alone (nn.Meta), drawn from its initialiser,
// whose values for the chunk's elements are those a whole build gives
// them, so that no rank ever holds the whole model.
func (r *Rank) chunk(i int) *tensor.Tensor {
	s := &r.shards[i]
	if !(*s.slot).IsMeta() {
		return r.Shard(i, (*s.slot))
	}
	start := min(r.group.Rank()*s.chunk, s.n)
	drawn := tensor.Generate(func(dst []float32) { // past the parameter's end: zero padding
		s.full.Init.Fill(dst[:min(s.chunk, s.n-start)], start)
	}, s.chunk)
	if s.dt == dtype.F32 {
		return drawn
	}
	defer tensor.Free(drawn)
	return drawn.To(s.dt)
}

// install makes padded (chunk·Size elements) the storage of s's whole
// parameter, and this rank's chunk of it the optimizer's.
func (r *Rank) install(s *shard, padded *tensor.Tensor) {
	(*s.slot) = view(padded, s.n, s.shape)
	if s.local != nil && !r.Info.Sharding.Parameters {
		s.local.Value = padded.Flat(r.group.Rank()*s.chunk, s.chunk)
	}
}

// Comm is the rank's communicator: every data-parallel rank.
func (r *Rank) Comm() comm.Communicator { return r.comm }

// Chunks says which of the count chunks of every sharded tensor this rank
// holds: its place in the ranks that split the state (all of Comm's but
// under hsdp, its shard group's), and their number.
func (r *Rank) Chunks() (index, count int) { return r.group.Rank(), r.group.Size() }

// Replica is the index of the copy of the sharded state this rank holds
// a chunk of: its shard group under hsdp, 0 for every other strategy.
// Replica 0's ranks alone write a checkpoint's chunks.
func (r *Rank) Replica() int {
	if r.replicas == nil {
		return 0
	}
	return r.replicas.Rank()
}

// JoinChunks all-gathers every chunk of a sharded tensor (an optimizer
// moment) into its padded whole, flat: count chunks in order (see Chunks).
func (r *Rank) JoinChunks(ctx context.Context, chunk *tensor.Tensor) (*tensor.Tensor, error) {
	var all *tensor.Tensor
	err := r.link.do(ctx, func(ctx context.Context, c comm.Communicator) (err error) {
		all = tensor.New(chunk.DType(), chunk.Len()*c.Size())
		if err = comm.AllGatherTensor(ctx, c, chunk, all); err != nil { // a chunk is 1-D
			tensor.Free(all)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("strategy %s: joining chunks: %w", r.Info.Name, err)
	}
	return all, nil
}

// SumChunks returns the sum of v over the ranks that hold distinct chunks
// (a squared gradient norm of chunks: hsdp's replicas hold the same).
func (r *Rank) SumChunks(ctx context.Context, v float64) (float64, error) {
	var s float64
	err := r.link.do(ctx, func(ctx context.Context, c comm.Communicator) (err error) {
		s, err = comm.SumFloat64(ctx, c, v)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("strategy %s: %w", r.Info.Name, err)
	}
	return s, nil
}

// Gathered returns the parameter bytes this rank has sent in all-gathers,
// by wire dtype (FP8 weights 1 byte each, their scales under float32).
func (r *Rank) Gathered() map[dtype.DType]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.gathered)
}

// AfterStep brings every rank's updated chunks back into the parameters:
// an all-gather (ZeRO-1, ZeRO-2); FSDP instead frees the whole parameters
// until the next forward gathers them.
func (r *Rank) AfterStep(ctx context.Context) error {
	r.forgetAccumulated()
	if !r.Info.Sharding.OptimizerState {
		return nil
	}
	for _, p := range r.params {
		tensor.Discard(p.Var.Grad) // ZeRO-1: the optimizer freed the chunk's view, not this storage
		p.Var.Grad = nil
	}
	if r.Info.Sharding.Parameters {
		for _, u := range append([]*unit{&r.root}, r.unitList()...) {
			if err := r.settle(u); err != nil { // a prefetch nothing used
				return err
			}
			r.release(u)
		}
		return nil
	}
	return r.link.do(ctx, func(ctx context.Context, c comm.Communicator) error {
		for i := range r.shards {
			s := &r.shards[i]
			padded := tensor.New(s.dt, s.chunk*c.Size())
			if err := comm.AllGatherTensor(ctx, c, s.local.Value, padded); err != nil {
				tensor.Free(padded)
				return fmt.Errorf("strategy %s: all-gather of %s: %w", r.Info.Name, r.path(i), err)
			}
			r.count(s.dt, s.local.Value)
			tensor.Discard((*s.slot)) // s.local.Value viewed it
			tensor.FreeView(s.local.Value)
			r.install(s, padded)
		}
		return nil
	})
}

// stepContext is the context of the running step's forward or backward
// (Pass, SyncGrads), under which precision's agreements run: the loss
// scaler and FP8 recipes call Any and Max with no context of their own.
func (r *Rank) stepContext() context.Context {
	if r.step == nil {
		return context.Background()
	}
	return r.step
}

// Any reports whether any rank's found is true (a non-finite gradient),
// so that all ranks skip a step together.
func (r *Rank) Any(found bool) (bool, error) {
	flag := tensor.New(dtype.F32, 1)
	defer tensor.Free(flag)
	if found {
		flag.Fill(1)
	}
	if err := r.allReduce(flag, comm.Max); err != nil {
		return false, fmt.Errorf("strategy %s: agreeing on inf/NaN: %w", r.Info.Name, err)
	}
	return flag.Float32s()[0] != 0, nil
}

// Max returns the largest over ranks of v (an FP8 amax); NaN if any is.
func (r *Rank) Max(v float32) (float32, error) {
	t := tensor.FromFloat32([]float32{v}, 1)
	if err := r.allReduce(t, comm.Max); err != nil {
		return 0, fmt.Errorf("strategy %s: amax: %w", r.Info.Name, err)
	}
	return t.Float32s()[0], nil
}

// allReduce reduces t over every data-parallel rank in the running
// step's context.
func (r *Rank) allReduce(t *tensor.Tensor, op comm.Op) error {
	return r.link.do(r.stepContext(), func(ctx context.Context, _ comm.Communicator) error {
		return comm.AllReduceTensor(ctx, r.comm, t, op)
	})
}

// Sum returns the sum over every data-parallel rank of v (a vote).
func (r *Rank) Sum(ctx context.Context, v float64) (float64, error) {
	var s float64
	err := r.link.do(ctx, func(ctx context.Context, _ comm.Communicator) (err error) {
		s, err = comm.SumFloat64(ctx, r.comm, v)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("strategy %s: %w", r.Info.Name, err)
	}
	return s, nil
}

// Collective runs fn on the rank's communicator once every collective
// issued before it is done (the strategy's own run in the background: a
// prefetched gather, a gradient reduction), so that every rank makes its
// calls in one order: how the rank's user (the fabric's AllGather,
// AllReduce ...) communicates while a strategy is set up.
func (r *Rank) Collective(ctx context.Context, fn func(context.Context, comm.Communicator) error) error {
	return r.link.do(ctx, func(ctx context.Context, _ comm.Communicator) error { return fn(ctx, r.comm) })
}

// gatherAs all-gathers chunk as it is stored into a padded whole.
func (r *Rank) gatherAs(ctx context.Context, c comm.Communicator, chunk *tensor.Tensor) (*tensor.Tensor, error) {
	all := tensor.New(chunk.DType(), chunk.Len()*c.Size())
	if err := comm.AllGatherTensor(ctx, c, chunk, all); err != nil {
		tensor.Free(all)
		return nil, err
	}
	r.count(chunk.DType(), chunk)
	return all, nil
}

func (r *Rank) count(dt dtype.DType, sent *tensor.Tensor) {
	r.mu.Lock()
	r.gathered[dt] += int64(sent.Bytes())
	r.mu.Unlock()
}

// Bytes is what this rank holds now for parameters and gradients, each
// storage counted once.
func (r *Rank) Bytes() (params, grads int64) {
	for _, s := range r.shards[:len(r.params)] {
		if !(*s.slot).IsMeta() {
			params += int64((*s.slot).Bytes())
		}
		if s.local != nil && !tensor.SameStorage(s.local.Value, (*s.slot)) {
			params += int64(s.local.Value.Bytes())
		}
		if s.codes != nil {
			params += int64(s.codes.Bytes())
		}
		if s.acc != nil {
			grads += int64(s.acc.Bytes())
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

// FrozenBytes is what this rank holds now of frozen weights (quantized
// codes; FSDP only: other strategies leave them to the model, whole).
func (r *Rank) FrozenBytes() int64 {
	var b int64
	for _, s := range r.shards[len(r.params):] {
		if !(*s.slot).IsMeta() {
			b += int64((*s.slot).Bytes())
		}
		b += int64(s.local.Value.Bytes())
	}
	return b
}

// view shows the first n elements of padded in shape: padded itself when
// nothing is padding, else a view whose Discard frees padded.
func view(padded *tensor.Tensor, n int, shape []int) *tensor.Tensor {
	if padded.Len() == n {
		padded.SetShape(shape...)
		return padded
	}
	flat := padded.Flat(0, n)
	v := flat.Reshape(shape...)
	tensor.FreeView(flat)
	return v
}

// slice returns a 1-D copy of n elements of t's flat storage from start,
// zero-padded past t's end.
func slice(t *tensor.Tensor, start, n int) *tensor.Tensor {
	out := tensor.New(t.DType(), n)
	if m := min(t.Len(), start+n) - start; m > 0 {
		src, dst := t.Flat(start, m), out.Flat(0, m)
		dst.CopyFrom(src) // one dtype: the bytes as they are
		tensor.FreeView(src)
		tensor.FreeView(dst)
	}
	return out
}

// pad returns t flattened to n elements, zero-padded.
func pad(t *tensor.Tensor, n int) *tensor.Tensor { return slice(t, 0, n) }

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
	Info   Info
	opts   Options
	comm   comm.Communicator
	link   link
	params []nn.NamedParam
	// shards are the parameters', in params' order, then the frozen
	// weights' (FSDP), whose paths frozen lists.
	shards  []shard
	frozen  []string
	units   []unit
	unitOf  map[any]int // a unit's module → its index in units
	root    unit        // the parameters outside every unit
	gathers Gathers
	// gathered counts the parameter bytes this rank sent in all-gathers,
	// by wire dtype; the link's goroutines add to it.
	mu       sync.Mutex
	gathered map[dtype.DType]int64
}

// Gathers is what precision decides of FSDP's parameter all-gathers (its
// GatherQuantizer and GatherUser roles); the zero value gathers every
// parameter in its storage dtype and decodes nothing.
type Gathers struct {
	// Format picks a parameter's wire dtype and the scale it is cast with
	// (FP8 weights); ok false: its storage dtype.
	Format func(path string) (dt dtype.DType, scale float32, ok bool)
	// Use offers a parameter's gathered codes, whole, cast with scale, and
	// this rank's chunk, to the plugin that computes with them as they are
	// (the weight then is never decoded); Drop tells it they are freed.
	Use  func(path string, codes, chunk *tensor.Tensor, scale float32) bool
	Drop func(path string)
}

// Options are the choices a strategy leaves to its user.
type Options struct {
	// Units picks the sharding units; nil is DefaultUnits.
	Units UnitFunc
	// KeepAfterForward keeps an FSDP unit's gathered parameters from its
	// forward to its backward instead of gathering them twice (FSDP2's
	// reshard_after_forward=False): less communication, more memory.
	KeepAfterForward bool
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
	chunk int // elements per rank, padded; a multiple of a frozen weight's block
	// wire is the format this pass's first gather of the parameter used,
	// which regathers for its backward and recompute reuse: an FP8 scale
	// may have moved since, and the values must be those of the forward.
	wire *wire
	// codes are the parameter gathered in its FP8 wire format, which a
	// plugin computes with (Gathers.Use) while the whole value stays meta.
	codes *tensor.Tensor
	// reduced is the gradient a unit's reduction produced this pass (the
	// full mean, or this rank's chunk of it), written by the link's
	// goroutine and installed by SyncGrads once every reduction is done.
	reduced *tensor.Tensor
}

// NewRank prepares rank c.Rank() of strategy info over m's parameters,
// which must be identical on every rank; gathers says how FSDP gathers
// them. Under FSDP the parameters are freed but for this rank's chunks.
func NewRank(info Info, c comm.Communicator, m nn.Module, gathers Gathers, opts Options) (*Rank, error) {
	r := &Rank{Info: info, opts: opts, comm: c, link: link{c: c}, params: nn.Parameters(m), gathers: gathers, gathered: map[dtype.DType]int64{}}
	size := c.Size()
	for _, p := range r.params {
		v := p.Var.Value
		if v.DType().Bits() < 8 {
			return nil, fmt.Errorf("strategy %s: %s is %s, which has no byte-addressable shards", info.Name, p.Path, v.DType())
		}
		if v.IsMeta() && (!info.Sharding.Parameters || p.Var.Init == nil) {
			return nil, fmt.Errorf("strategy %s: %s has a shape and no values; only fsdp initialises parameters built on shapes alone (nn.Meta), and only those with an initialiser", info.Name, p.Path)
		}
		r.shards = append(r.shards, newShard(p.Var, &p.Var.Value, 1, size))
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
func (s *shard) whole() bool { return !(*s.slot).IsMeta() || s.codes != nil }

// newShard describes the value in slot (of parameter full, nil for a
// frozen weight) split over size ranks in chunks of whole blocks.
func newShard(full *autograd.Var, slot **tensor.Tensor, block, size int) shard {
	v := *slot
	n := v.Len()
	blocks := (n + block - 1) / block
	return shard{full: full, slot: slot, dt: v.DType(), shape: v.Shape(), n: n, chunk: (blocks + size - 1) / size * block}
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

// Shard returns this rank's chunk of a tensor shaped like the i-th
// parameter (1-D, zero-padded), as a sharded optimizer holds its state.
func (r *Rank) Shard(i int, t *tensor.Tensor) *tensor.Tensor {
	s := r.shards[i]
	return slice(t, r.comm.Rank()*s.chunk, s.chunk)
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
		if r.Info.Sharding.Parameters {
			s.local.Value = r.chunk(i)
			*s.slot = tensor.Meta(s.dt, s.shape...)
		} else {
			r.install(s, pad(old, s.chunk*r.comm.Size()))
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
	start := min(r.comm.Rank()*s.chunk, s.n)
	vals := make([]float32, s.chunk) // past the parameter's end: zero padding
	s.full.Init.Fill(vals[:min(s.chunk, s.n-start)], start)
	wrapped := tensor.FromFloat32(vals, s.chunk)
	defer tensor.Free(wrapped)
	if s.dt == dtype.F32 {
		return wrapped.Clone() // into pool storage, which the allocator counts
	}
	return wrapped.To(s.dt)
}

// install makes padded (chunk·Size elements) the storage of s's whole
// parameter, and this rank's chunk of it the optimizer's.
func (r *Rank) install(s *shard, padded *tensor.Tensor) {
	(*s.slot) = view(padded, s.n, s.shape)
	if s.local != nil && !r.Info.Sharding.Parameters {
		s.local.Value = padded.Flat(r.comm.Rank()*s.chunk, s.chunk)
	}
}

// Comm is the rank's communicator.
func (r *Rank) Comm() comm.Communicator { return r.comm }

// Gathered returns the parameter bytes this rank has sent in all-gathers,
// by wire dtype (FP8 weights 1 byte each, their scales under float32).
func (r *Rank) Gathered() map[dtype.DType]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.gathered)
}

// Pass runs one forward pass, fn, in which the tape's Scoper is
// r.Scoper's: the parameters outside every unit are gathered first; a
// failed collective ends fn (see Guard).
func (r *Rank) Pass(ctx context.Context, fn func() (*autograd.Var, error)) (out *autograd.Var, err error) {
	for i := range r.shards {
		r.shards[i].wire = nil
	}
	err = r.Guard(func() error {
		if len(r.units) > 0 {
			r.prefetch(ctx, &r.units[0], false)
		}
		if err := r.whole(ctx, &r.root); err != nil {
			return err
		}
		out, err = fn()
		return err
	})
	return out, err
}

// failure carries a collective's error out of a scope.
type failure struct{ err error }

// Guard runs fn, a forward or backward pass, and returns the error of a
// collective that failed inside a unit's scope, which has no error to
// return, as fn's. The link is idle when Guard returns an error.
func (r *Rank) Guard(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(failure)
			if !ok {
				panic(p)
			}
			err = f.err
		}
		if err != nil {
			r.link.drain() // a prefetch nothing waited for; its values stay in its unit
		}
	}()
	return fn()
}

// wire is a parameter's all-gather format: its storage dtype (fp8 false)
// or dt with the sender's scale.
type wire struct {
	fp8   bool
	dt    dtype.DType
	scale float32
}

// Scoper returns the Scoper of one pass: it opens inner's scope for every
// module (inner may be nil) and, around each unit, gathers, frees and
// reduces as the strategy needs.
func (r *Rank) Scoper(ctx context.Context, inner autograd.Scoper) autograd.Scoper {
	return &passScoper{r: r, ctx: ctx, inner: inner}
}

type passScoper struct {
	r     *Rank
	ctx   context.Context
	inner autograd.Scoper
}

func (p *passScoper) EnterScope(tp *autograd.Tape, module any, x *autograd.Var) (*autograd.Var, func(*autograd.Var) *autograd.Var) {
	enter := func() (*autograd.Var, func(*autograd.Var) *autograd.Var) {
		if p.inner == nil {
			return x, func(v *autograd.Var) *autograd.Var { return v }
		}
		return p.inner.EnterScope(tp, module, x)
	}
	i, ok := p.r.unitOf[module]
	if !ok {
		return enter()
	}
	r, ctx, u := p.r, p.ctx, &p.r.units[i]
	if err := r.whole(ctx, u); err != nil {
		panic(failure{err})
	}
	// A recompute (activation checkpointing) runs in backward: the next
	// unit's turn has passed, and this one's backward follows at once.
	again := tp.Recomputing()
	if i+1 < len(r.units) && !again {
		r.prefetch(ctx, &r.units[i+1], false)
	}
	tp.OnBackward(func() error { return r.afterBackward(ctx, u) })
	in, exit := enter()
	return in, func(out *autograd.Var) *autograd.Var {
		out = exit(out)
		if !tp.NoGrad {
			tp.OnBackward(func() error { return r.beforeBackward(ctx, i) })
		}
		if tp.NoGrad || (!r.opts.KeepAfterForward && !again) {
			r.release(u)
		}
		return out
	}
}

// Resume passes a recompute's Scoper through to the inner one's (see
// autograd.ScopeResumer).
func (p *passScoper) Resume() autograd.Scoper {
	q := *p
	if s, ok := p.inner.(autograd.ScopeResumer); ok {
		q.inner = s.Resume()
	}
	return &q
}

// beforeBackward makes unit i whole for its backward and starts gathering
// the unit whose backward comes next.
func (r *Rank) beforeBackward(ctx context.Context, i int) error {
	if i > 0 {
		defer r.prefetch(ctx, &r.units[i-1], false)
	}
	return r.whole(ctx, &r.units[i])
}

// afterBackward starts reducing the gradients of u, whose backward is
// done, and frees its parameters.
func (r *Rank) afterBackward(ctx context.Context, u *unit) error {
	r.reduce(ctx, u.params)
	r.release(u)
	return nil
}

// prefetch starts gathering u's freed parameters, if any (FSDP): in
// their storage dtype when exact, else in the format their precision
// asks for.
func (r *Rank) prefetch(ctx context.Context, u *unit, exact bool) {
	if !r.Info.Sharding.Parameters || u.gather != nil {
		return
	}
	var todo []int
	var wires []wire
	for _, i := range u.params {
		s := &r.shards[i]
		if s.whole() {
			continue
		}
		todo = append(todo, i)
		switch {
		case exact:
			wires = append(wires, wire{})
		case s.wire != nil:
			wires = append(wires, *s.wire)
		default: // read here, not on the link: the plugin's scale is the forward's
			w := wire{}
			if r.gathers.Format != nil {
				w.dt, w.scale, w.fp8 = r.gathers.Format(r.path(i))
			}
			s.wire = &w
			wires = append(wires, w)
		}
	}
	if len(todo) == 0 {
		return
	}
	got := make([]gathered, len(r.shards))
	u.got = got
	u.gather = r.link.start(ctx, func(ctx context.Context, c comm.Communicator) (err error) {
		for k, i := range todo {
			chunk, g := r.shards[i].local.Value, &got[i]
			if g.wire = wires[k]; g.wire.fp8 {
				g.value, g.scales, err = r.gatherCodes(ctx, c, chunk, g.wire.dt, g.wire.scale)
			} else {
				g.value, err = r.gatherAs(ctx, c, chunk)
			}
			if err != nil {
				return fmt.Errorf("strategy %s: all-gather of %s: %w", r.Info.Name, r.path(i), err)
			}
		}
		return nil
	})
}

// gathered is what a unit's gather brought of one parameter: its padded
// whole value, or its FP8 codes with every rank's scale.
type gathered struct {
	wire   wire
	value  *tensor.Tensor
	scales []float32
}

// whole makes u's parameters whole, gathering what prefetch has not.
func (r *Rank) whole(ctx context.Context, u *unit) error {
	r.prefetch(ctx, u, false)
	return r.settle(u)
}

// settle waits for u's gather in flight, if any, and installs what it
// gathered.
func (r *Rank) settle(u *unit) error {
	if u.gather == nil {
		return nil
	}
	err := u.gather.wait()
	for i, g := range u.got {
		if g.value == nil {
			continue
		}
		s := &r.shards[i]
		if g.wire.fp8 && r.use(i, g) {
			continue
		}
		v := g.value
		if g.wire.fp8 {
			v = decode(g.value, g.scales, s.chunk, s.dt)
			tensor.Free(g.value)
		}
		tensor.Free(*s.slot)
		r.install(s, v)
	}
	u.gather, u.got = nil, nil
	return err
}

// use offers parameter i's gathered codes to its plugin, which takes them
// only cast with one scale: every rank's (ranks agree on FP8 scales).
func (r *Rank) use(i int, g gathered) bool {
	if r.gathers.Use == nil {
		return false
	}
	for _, sc := range g.scales {
		if sc != g.wire.scale {
			return false
		}
	}
	s := &r.shards[i]
	codes := view(g.value, s.n, s.shape)
	if !r.gathers.Use(r.path(i), codes, s.local.Value, g.wire.scale) {
		if codes != g.value {
			tensor.FreeView(codes)
		}
		return false
	}
	s.codes = codes
	return true
}

// release frees u's whole parameters under FSDP, keeping the chunks.
func (r *Rank) release(u *unit) {
	if !r.Info.Sharding.Parameters {
		return
	}
	for _, i := range u.params {
		s := &r.shards[i]
		if s.codes != nil {
			r.gathers.Drop(r.path(i))
			tensor.Discard(s.codes)
			s.codes = nil
		}
		r.free(s)
	}
}

// free replaces s's whole parameter by a meta tensor of its shape.
func (r *Rank) free(s *shard) {
	if !(*s.slot).IsMeta() {
		tensor.Discard((*s.slot))
		(*s.slot) = tensor.Meta(s.dt, s.shape...)
	}
}

// GatherAll makes every parameter whole on this rank, exactly (in its
// storage dtype, whatever its gathers travel in), after FSDP training,
// before evaluating or saving the full model; the next optimizer step
// frees them again.
func (r *Rank) GatherAll(ctx context.Context) error {
	all := append([]*unit{&r.root}, r.unitList()...)
	for _, u := range all {
		if err := r.settle(u); err != nil { // a prefetch in flight, in its own format
			return err
		}
		r.release(u)
		r.prefetch(ctx, u, true)
	}
	for _, u := range all {
		if err := r.whole(ctx, u); err != nil {
			return err
		}
	}
	return nil
}

// Whole returns parameter i whole and exact, gathering it (alone) if this
// rank holds only its chunk, and the function that frees what was
// gathered: how a sharded model is written out one parameter at a time.
// Every rank must call it for the same parameters in the same order.
func (r *Rank) Whole(ctx context.Context, i int) (t *tensor.Tensor, release func(), err error) {
	s := &r.shards[i]
	if !(*s.slot).IsMeta() {
		return (*s.slot), func() {}, nil
	}
	var padded *tensor.Tensor
	err = r.link.do(ctx, func(ctx context.Context, c comm.Communicator) (err error) {
		padded, err = r.gatherAs(ctx, c, s.local.Value)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("strategy %s: all-gather of %s: %w", r.Info.Name, r.path(i), err)
	}
	v := view(padded, s.n, s.shape)
	return v, func() { tensor.Discard(v) }, nil
}

func (r *Rank) unitList() []*unit {
	out := make([]*unit, len(r.units))
	for i := range r.units {
		out[i] = &r.units[i]
	}
	return out
}

// reduce starts reducing the gradients of the given parameters to their
// mean over ranks: all-reduced in full (DDP, ZeRO-1) or reduce-scattered
// so that each rank keeps only its chunk's (ZeRO-2, FSDP). The gradients
// leave the parameters; SyncGrads puts the results in place.
func (r *Rank) reduce(ctx context.Context, params []int) {
	if r.comm.Size() == 1 && !r.Info.Sharding.OptimizerState {
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

// reduceOne reduces g, which it owns, into s.reduced.
func (r *Rank) reduceOne(ctx context.Context, c comm.Communicator, s *shard, g *tensor.Tensor) error {
	inv := 1 / float64(c.Size())
	dt := g.DType()
	var out *tensor.Tensor
	if r.Info.Sharding.Gradients {
		padded := pad(g, s.chunk*c.Size())
		tensor.Free(g)
		out = tensor.New(dt, s.chunk)
		err := c.ReduceScatter(ctx, padded.Data(), out.Data(), dt, comm.Sum)
		tensor.Free(padded)
		if err != nil {
			tensor.Free(out)
			return fmt.Errorf("reduce-scatter: %w", err)
		}
	} else {
		out = g
		if r.Info.Sharding.OptimizerState && s.n != s.chunk*c.Size() { // the chunk's gradient views it
			out = pad(g, s.chunk*c.Size())
			tensor.Free(g)
		}
		if err := c.AllReduce(ctx, out.Data(), dt, comm.Sum); err != nil {
			tensor.Free(out)
			return fmt.Errorf("all-reduce: %w", err)
		}
	}
	out.ScaleInPlace(inv)
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
// gives each parameter, or its chunk, the mean gradient over ranks. Ranks
// must hold equal shares of the global batch.
func (r *Rank) SyncGrads(ctx context.Context) error {
	all := make([]int, len(r.shards))
	for i := range all {
		all[i] = i
	}
	r.reduce(ctx, all)
	if err := r.link.drain(); err != nil {
		return err
	}
	for i := range r.shards {
		s := &r.shards[i]
		g := s.reduced
		if g == nil {
			continue
		}
		s.reduced = nil
		switch {
		case r.Info.Sharding.Gradients:
			s.local.Grad = g
		case r.Info.Sharding.OptimizerState:
			s.full.Grad = view(g, s.n, s.shape)
			s.local.Grad = g.Flat(r.comm.Rank()*s.chunk, s.chunk)
		default:
			s.full.Grad = g
		}
	}
	return nil
}

// AfterStep brings every rank's updated chunks back into the parameters:
// an all-gather (ZeRO-1, ZeRO-2); FSDP instead frees the whole parameters
// until the next forward gathers them.
func (r *Rank) AfterStep(ctx context.Context) error {
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
			if err := c.AllGather(ctx, s.local.Value.Data(), padded.Data()); err != nil {
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

// Any reports whether any rank's found is true (a non-finite gradient),
// so that all ranks skip a step together.
func (r *Rank) Any(found bool) (bool, error) {
	flag := tensor.New(dtype.F32, 1)
	defer tensor.Free(flag)
	if found {
		flag.Fill(1)
	}
	err := r.link.do(context.Background(), func(ctx context.Context, c comm.Communicator) error {
		return c.AllReduce(ctx, flag.Data(), dtype.F32, comm.Max)
	})
	if err != nil {
		return false, fmt.Errorf("strategy %s: agreeing on inf/NaN: %w", r.Info.Name, err)
	}
	return flag.Float32s()[0] != 0, nil
}

// Max returns the largest over ranks of v (an FP8 amax); NaN if any is.
func (r *Rank) Max(v float32) (float32, error) {
	vals := []float32{v}
	t := tensor.FromFloat32(vals, 1)
	err := r.link.do(context.Background(), func(ctx context.Context, c comm.Communicator) error {
		return c.AllReduce(ctx, t.Data(), dtype.F32, comm.Max)
	})
	if err != nil {
		return 0, fmt.Errorf("strategy %s: amax: %w", r.Info.Name, err)
	}
	return vals[0], nil
}

// Sum returns the sum over ranks of v (a squared gradient norm of chunks).
func (r *Rank) Sum(ctx context.Context, v float64) (float64, error) {
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

// AllGather gathers every rank's send into recv in rank order, in turn
// with the strategy's own collectives.
func (r *Rank) AllGather(ctx context.Context, send, recv []byte) error {
	return r.link.do(ctx, func(ctx context.Context, c comm.Communicator) error {
		return c.AllGather(ctx, send, recv)
	})
}

// gatherAs all-gathers chunk as it is stored into a padded whole.
func (r *Rank) gatherAs(ctx context.Context, c comm.Communicator, chunk *tensor.Tensor) (*tensor.Tensor, error) {
	all := tensor.New(chunk.DType(), chunk.Len()*c.Size())
	if err := c.AllGather(ctx, chunk.Data(), all.Data()); err != nil {
		tensor.Free(all)
		return nil, err
	}
	r.count(chunk.DType(), chunk)
	return all, nil
}

func (r *Rank) count(dt dtype.DType, sent *tensor.Tensor) {
	r.mu.Lock()
	r.gathered[dt] += int64(len(sent.Data()))
	r.mu.Unlock()
}

// gatherCodes all-gathers chunk·scale cast (saturating) to dt into a
// padded whole, with every rank's scale.
func (r *Rank) gatherCodes(ctx context.Context, c comm.Communicator, chunk *tensor.Tensor, dt dtype.DType, scale float32) (*tensor.Tensor, []float32, error) {
	scales, err := r.gatherAs(ctx, c, tensor.FromFloat32([]float32{scale}, 1))
	if err != nil {
		return nil, nil, err
	}
	defer tensor.Free(scales)
	codes := tensor.ScaleTo(chunk, scale, dt)
	all, err := r.gatherAs(ctx, c, codes)
	tensor.Free(codes)
	if err != nil {
		return nil, nil, err
	}
	return all, scales.Float32s(), nil
}

// decode returns padded codes, chunks of per elements each cast with its
// rank's scale, unscaled in dt: the values a rank holding the whole
// weight in dt would see after the gather.
func decode(codes *tensor.Tensor, scales []float32, per int, dt dtype.DType) *tensor.Tensor {
	out := tensor.New(dt, codes.Len())
	for rank, sc := range scales {
		part := codes.Flat(rank*per, per)
		unscaled := tensor.UnscaleTo(part, sc, dt)
		tensor.Free(part)
		dst := out.Flat(rank*per, per)
		dst.CopyFrom(unscaled)
		tensor.Free(dst)
		tensor.Free(unscaled)
	}
	return out
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
	size := t.DType().Bits() / 8
	if start < t.Len() {
		copy(out.Data(), t.Data()[start*size:min(t.Len(), start+n)*size])
	}
	return out
}

// pad returns t flattened to n elements, zero-padded.
func pad(t *tensor.Tensor, n int) *tensor.Tensor { return slice(t, 0, n) }

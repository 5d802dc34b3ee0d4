package strategy

import (
	"context"
	"fmt"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/tensor"
)

// Pass runs one forward pass, fn, in which the tape's Scoper is
// r.Scoper's: the parameters outside every unit are gathered first; a
// failed collective ends fn (see Guard).
func (r *Rank) Pass(ctx context.Context, fn func() (*autograd.Var, error)) (out *autograd.Var, err error) {
	r.step = ctx
	for i := range r.shards {
		r.shards[i].wire = nil
	}
	err = r.Guard(func() error {
		if len(r.units) > 0 {
			r.prefetch(ctx, &r.units[0], r.forwardGEMMs())
		}
		if err := r.whole(ctx, &r.root, r.forwardGEMMs()); err != nil {
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

// wire is a parameter's all-gather format: its storage dtype (dt
// Invalid), dt with the sender's scale (FP8 codes), a plain cast to dt
// (scale 0), which the receivers cast back, or its plugin's codes
// (coded, Comms.Codec).
type wire struct {
	dt    dtype.DType
	scale float32
	coded bool
}

// codes reports whether w sends codes cast with a scale.
func (w wire) codes() bool { return w.dt != dtype.Invalid && w.scale != 0 }

// GEMMs are the GEMMs of a Linear that a gather of its weight serves:
// the forward's reads the weight along its rows, the input gradient's
// down its columns. Zero asks for the exact weight.
type GEMMs uint8

const (
	ForwardGEMMs GEMMs = 1 << iota
	BackwardGEMMs
)

// forwardGEMMs is what a forward pass's gather serves: the backward too
// if the unit is kept for it.
func (r *Rank) forwardGEMMs() GEMMs {
	if r.opts.KeepAfterForward {
		return ForwardGEMMs | BackwardGEMMs
	}
	return ForwardGEMMs
}

// backwardGEMMs is what a backward pass's gather serves: the forward too
// if a checkpointed forward is recomputed with it.
func (r *Rank) backwardGEMMs() GEMMs {
	if r.recomputes {
		return ForwardGEMMs | BackwardGEMMs
	}
	return BackwardGEMMs
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
	r.recomputes = r.recomputes || tp.Recompute != nil
	// A recompute (activation checkpointing) runs in backward: the next
	// unit's turn has passed, and this one's backward follows at once.
	again := tp.Recomputing()
	gemms := r.forwardGEMMs()
	if again {
		gemms = r.backwardGEMMs()
	}
	if err := r.whole(ctx, u, gemms); err != nil {
		panic(failure{err})
	}
	if i+1 < len(r.units) && !again {
		r.prefetch(ctx, &r.units[i+1], gemms)
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
		defer r.prefetch(ctx, &r.units[i-1], r.backwardGEMMs())
	}
	return r.whole(ctx, &r.units[i], r.backwardGEMMs())
}

// afterBackward starts reducing the gradients of u, whose backward is
// done, and frees its parameters.
func (r *Rank) afterBackward(ctx context.Context, u *unit) error {
	r.reduce(ctx, u.params)
	r.release(u)
	return nil
}

// prefetch starts gathering u's freed parameters, if any (FSDP), for
// gemms: in their storage dtype when gemms is 0, else in the format their
// precision asks for.
func (r *Rank) prefetch(ctx context.Context, u *unit, gemms GEMMs) {
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
		case gemms == 0:
			wires = append(wires, wire{})
		case s.wire != nil:
			wires = append(wires, *s.wire)
		default: // read here, not on the link: the plugin's scale is the forward's
			w := r.wireOf(i)
			s.wire = &w
			wires = append(wires, w)
		}
	}
	if len(todo) == 0 {
		return
	}
	got := make([]gathered, len(r.shards))
	u.got = got
	codecs := make([]comm.Codec, len(todo))
	for k, i := range todo {
		if wires[k].coded {
			codecs[k] = r.comms.Codec(r.path(i), gemms)
		}
	}
	u.gather = r.link.start(ctx, func(ctx context.Context, c comm.Communicator) (err error) {
		for k, i := range todo {
			chunk, g := r.shards[i].local.Value, &got[i]
			switch g.wire = wires[k]; {
			case g.wire.coded:
				g.codec = codecs[k]
				g.parts, g.scales, err = r.gatherCoded(ctx, c, chunk, g.codec)
			case g.wire.codes():
				g.value, g.scales, err = r.gatherCodes(ctx, c, chunk, g.wire.dt, g.wire.scale)
			case g.wire.dt != dtype.Invalid:
				g.value, err = r.gatherCast(ctx, c, chunk, g.wire.dt)
			default:
				g.value, err = r.gatherAs(ctx, c, chunk)
			}
			if err != nil {
				return fmt.Errorf("strategy %s: all-gather of %s: %w", r.Info.Name, r.path(i), err)
			}
		}
		return nil
	})
}

// wireOf is the format parameter i's gathers travel in this pass.
func (r *Rank) wireOf(i int) wire {
	s := &r.shards[i]
	if s.full == nil { // frozen codes travel as they are
		return wire{}
	}
	if r.comms.Codec != nil {
		if c := r.comms.Codec(r.path(i), ForwardGEMMs); c != nil && c.DType().Bits()*s.chunk%8 == 0 { // E2M1 chunks of whole bytes
			return wire{coded: true}
		}
	}
	if r.comms.Format != nil {
		if dt, scale, ok := r.comms.Format(r.path(i)); ok && (dt != s.dt || scale != 0) {
			return wire{dt: dt, scale: scale}
		}
	}
	return wire{}
}

// gathered is what a unit's gather brought of one parameter: its padded
// whole value (a plain cast's, cast back), its FP8 codes with every
// rank's scale, or its codec's parts with the agreed amaxes (scales).
type gathered struct {
	wire   wire
	value  *tensor.Tensor
	scales []float32
	codec  comm.Codec
	parts  []*tensor.Tensor
}

// whole makes u's parameters whole for gemms, gathering what prefetch
// has not.
func (r *Rank) whole(ctx context.Context, u *unit, gemms GEMMs) error {
	r.prefetch(ctx, u, gemms)
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
		s := &r.shards[i]
		if g.parts != nil {
			g.codec.Use(g.parts, g.scales)
			for _, p := range g.parts {
				tensor.Free(p)
			}
			s.coded = true
			continue
		}
		if g.value == nil {
			continue
		}
		if g.wire.codes() && r.use(i, g) {
			continue
		}
		v := g.value
		if g.wire.codes() {
			v = decode(g.value, g.scales, s.chunk, s.dt)
			tensor.Free(g.value)
		}
		tensor.Free(*s.slot)
		r.install(s, v)
		s.rounded = g.wire.dt != dtype.Invalid
	}
	u.gather, u.got = nil, nil
	return err
}

// use offers parameter i's gathered codes to its plugin, which takes them
// only cast with one scale: every rank's (ranks agree on FP8 scales).
func (r *Rank) use(i int, g gathered) bool {
	if r.comms.Use == nil {
		return false
	}
	for _, sc := range g.scales {
		if sc != g.wire.scale {
			return false
		}
	}
	s := &r.shards[i]
	codes := view(g.value, s.n, s.shape)
	if !r.comms.Use(r.path(i), codes, s.local.Value, g.wire.scale) {
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
			r.comms.Drop(r.path(i))
			tensor.Discard(s.codes)
			s.codes = nil
		}
		if s.coded {
			r.comms.Drop(r.path(i))
			s.coded = false
		}
		r.free(s)
	}
}

// free replaces s's whole parameter by a meta tensor of its shape.
func (r *Rank) free(s *shard) {
	s.rounded = false
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
		r.prefetch(ctx, u, 0)
	}
	for _, u := range all {
		if err := r.whole(ctx, u, 0); err != nil {
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
	if !(*s.slot).IsMeta() && !s.rounded {
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

// gatherCoded has the ranks agree on the amaxes of codec's blocks, casts
// chunk with their scales and all-gathers the codes of each part.
func (r *Rank) gatherCoded(ctx context.Context, c comm.Communicator, chunk *tensor.Tensor, codec comm.Codec) ([]*tensor.Tensor, []float32, error) {
	offset := c.Rank() * chunk.Len()
	amax := codec.Amaxes(chunk, offset)
	agreed := tensor.FromFloat32(amax, len(amax))
	defer tensor.Free(agreed)
	if err := comm.AllReduceTensor(ctx, c, agreed, comm.Max); err != nil {
		return nil, nil, err
	}
	amax = agreed.Float32s()
	codes := codec.Encode(chunk, offset, amax)
	parts := make([]*tensor.Tensor, 0, len(codes))
	var err error
	for _, part := range codes {
		var all *tensor.Tensor
		if err == nil {
			if all, err = r.gatherAs(ctx, c, part); err == nil {
				parts = append(parts, all)
			}
		}
		tensor.Free(part)
	}
	if err != nil {
		for _, p := range parts {
			tensor.Free(p)
		}
		return nil, nil, err
	}
	return parts, amax, nil
}

// gatherCast all-gathers chunk rounded to dt (to nearest even) into a
// padded whole of chunk's dtype, cast back: what a rank holding the whole
// parameter would see of it rounded to dt.
func (r *Rank) gatherCast(ctx context.Context, c comm.Communicator, chunk *tensor.Tensor, dt dtype.DType) (*tensor.Tensor, error) {
	narrow := chunk.To(dt)
	all, err := r.gatherAs(ctx, c, narrow)
	tensor.Free(narrow)
	if err != nil {
		return nil, err
	}
	defer tensor.Free(all)
	return all.To(chunk.DType()), nil
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

package fabric

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim/lowbit"
	"github.com/weftml/weft/parallel"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/quant"
	"github.com/weftml/weft/strategy"
	"github.com/weftml/weft/tensor"
)

// Peak is the allocator's predicted high-water mark (tensor.Memory's
// Peak) over one rank's training step and an evaluation after it, in
// bytes as the pool counts them (each buffer rounded up to its size
// class), and what is live at it.
type Peak struct {
	Bytes int64 `json:"bytes"`
	// At is the moment of the step the peak falls in: "forward of
	// blocks.7", "loss", "recompute of blocks.7", "backward of blocks.7",
	// "optimizer step", "after step", "evaluation of blocks.7".
	At string `json:"at"`
	// State is what a rank holds between steps: its parameters (whole or
	// chunks), frozen weights and AdamW moments.
	State int64 `json:"state"`
	// Grads are the gradients held at the peak (whole, or chunks once
	// reduce-scattered).
	Grads int64 `json:"grads"`
	// Gathered are FSDP units' parameters made whole: the running unit's
	// and the prefetched next one's.
	Gathered int64 `json:"gathered"`
	// Activations are the forward's results and saved tensors on the
	// tape at the peak: in a unit's forward, all it has computed so far.
	Activations int64 `json:"activations"`
	// Transient is the largest short-lived buffer set at the peak: a
	// unit's gradients before their reduction with its output's and
	// input's gradients, gathered logits, a padded gradient.
	Transient int64 `json:"transient"`
	// Scratch is kernels' float32 buffers (an op over bfloat16 tensors,
	// AdamW over non-float32 ones) and the running FP8 GEMM's operands
	// or dequantized weight.
	Scratch int64 `json:"scratch"`
	// Saved is what the whole forward and loss leave on the tape for
	// backward (autograd.Tape.RetainedPool of a pass on meta tensors).
	Saved int64 `json:"saved_activations"`
	// Process is the peak of one process that runs RanksInProcess ranks
	// (all the plan's), as in-process ranks do; under mpirun a process
	// runs one rank and peaks at Bytes. The ranks share the process's
	// pool and meet at every collective, so they hold their state,
	// gradients, gathered units and activations at once; their transient
	// buffers and scratch, short-lived between collectives, are one
	// rank's at a time (at the measured process peak, one rank's alone
	// were live).
	Process int64 `json:"process_bytes"`
	// ProcessMost is the process's peak when every rank peaks at once,
	// its transients and scratch too: the ranks' interleaving, which the
	// scheduler decides, puts a measured process peak between Process and
	// ProcessMost (2 ranks of the default gpt: 8.9-11.1 MiB measured over
	// runs, for 9.2 and 11.2).
	ProcessMost    int64 `json:"process_most_bytes"`
	RanksInProcess int   `json:"ranks_in_process"`
}

// inProcess is what ranks in one process hold when each holds p.
func (p Peak) inProcess(ranks int) int64 {
	return int64(ranks)*(p.State+p.Grads+p.Gathered+p.Activations) + p.Transient + p.Scratch
}

// planUnit is a sharding unit as strategy.DefaultUnits picks them, with its
// parameters in forward order.
type planUnit struct {
	Path   string
	Module nn.Module
	Params []nn.NamedParam
}

// planUnits walks m as strategy.NewRank does with strategy.DefaultUnits: in
// pre-order, lists have no forward of their own, and a parameter belongs
// to the first unit that holds it.
func planUnits(m nn.Module) []planUnit {
	seen := map[*autograd.Var]bool{}
	var units []planUnit
	for _, su := range strategy.Units(m, nil) {
		u := planUnit{Path: su.Path, Module: su.Module}
		for _, p := range nn.Parameters(su.Module) {
			if !seen[p.Var] {
				seen[p.Var] = true
				u.Params = append(u.Params, nn.NamedParam{Path: nn.Join(su.Path, p.Path), Var: p.Var})
			}
		}
		units = append(units, u)
	}
	return units
}

// segment is a stretch of the forward pass: one unit's forward (unit ≥ 0)
// or ops between units (-1), with what it leaves on the tape.
type segment struct {
	unit int
	act  int64
	// high is the most the segment's forward holds at once beyond what
	// the tape held before it: its results, which live until its unit's
	// scope closes and releases those backward does not read, and the
	// running op's scratch, which scratch is (kernelScratch, FP8
	// operands, a dequantized weight).
	high, scratch int64
	// io is the unit's output and input bytes: their gradients are live
	// through its backward; out is the output's alone, all that a
	// checkpointed unit keeps of its forward.
	io, out int64
	// fp8 is the largest FP8 GEMM's operands (x and w codes), which live
	// while it runs, in the forward and again in the backward.
	fp8 int64
	// work is the backward's working set at its widest tensor (see
	// workingSet): an op's output gradient and input gradient, decoded to
	// float32 when stored narrower.
	work int64
	// checkpointed is a unit whose forward is recomputed in backward.
	checkpointed bool
}

// workingSet is what an elementwise op's backward over t holds at once:
// the gradients of its output and input in t's dtype and, for a dtype
// narrower than float32, the float32 scratch each is decoded to.
func workingSet(t *tensor.Tensor) int64 {
	b := 2 * tensor.PoolBytes(t.DType(), t.Len())
	if dt := t.DType(); dt != dtype.F32 && dt != dtype.F64 {
		b += 2 * tensor.ScratchBytes(t.Len())
	}
	return b
}

// kept is what the segment leaves on the tape for backward.
func (sg segment) kept() int64 {
	if sg.checkpointed {
		return sg.out
	}
	return sg.act
}

// meter is the Scoper of a plan's pass on meta tensors: it cuts the pass
// into segments at unit boundaries, outside the precision's scopes as the
// strategy's Scoper sits.
// peakAt is what a pass holds at a moment: on its tape and in the
// running kernel's scratch.
type peakAt struct{ tape, scratch int64 }

type meter struct {
	inner  autograd.Scoper
	unitOf map[any]int
	fp8    map[any]bool // Linears whose GEMMs are FP8
	segs   []segment
	tape   *autograd.Tape
	last   int64  // RetainedPool at the end of the last segment
	high   peakAt // the running segment's most held at once (sample)
	held   int64  // the running segment's largest fp8 operands
	work   int64  // the running segment's largest workingSet
}

func (mt *meter) EnterScope(tp *autograd.Tape, module any, x *autograd.Var) (*autograd.Var, func(*autograd.Var) *autograd.Var) {
	in, exit := x, func(v *autograd.Var) *autograd.Var { return v }
	if mt.inner != nil {
		in, exit = mt.inner.EnterScope(tp, module, x)
	}
	if l, ok := module.(*nn.Linear); ok && in != nil {
		var operands int64
		switch w, frozen := quant.WeightOf(l); {
		case mt.fp8[module]:
			operands = tensor.PoolBytes(dtype.E4M3FN, in.Value.Len()) + tensor.PoolBytes(dtype.E4M3FN, l.Weight.Value.Len())
		case frozen: // dequantized for its GEMM
			operands = tensor.PoolBytes(in.Value.DType(), tensor.Numel(w.Shape()))
		}
		mt.held = max(mt.held, operands)
		mt.sample(operands)
	}
	if in != nil {
		mt.work = max(mt.work, workingSet(in.Value))
	}
	i, ok := mt.unitOf[module]
	if !ok {
		return in, func(out *autograd.Var) *autograd.Var {
			out = exit(out)
			if out != nil {
				mt.work = max(mt.work, workingSet(out.Value))
			}
			return out
		}
	}
	mt.cut(tp, -1, 0, 0)
	var io int64
	if x != nil {
		io = tensor.PoolBytes(x.Value.DType(), x.Value.Len())
	}
	return in, func(out *autograd.Var) *autograd.Var {
		out = exit(out)
		var outBytes int64
		if out != nil {
			outBytes = tensor.PoolBytes(out.Value.DType(), out.Value.Len())
		}
		mt.cut(tp, i, io+outBytes, outBytes)
		return out
	}
}

// cut ends the running segment as one of unit's.
func (mt *meter) cut(tp *autograd.Tape, unit int, io, out int64) {
	mt.sample(0)
	now := tp.RetainedPool()
	mt.segs = append(mt.segs, segment{unit: unit, act: now - mt.last, high: mt.high.tape + mt.high.scratch - mt.last, scratch: mt.high.scratch,
		io: io, out: out, fp8: mt.held, work: mt.work})
	mt.last, mt.high, mt.held, mt.work = now, peakAt{}, 0, 0
}

// sample notes what the pass holds now: the tape's retained results and
// scratch.
func (mt *meter) sample(scratch int64) {
	if now := mt.tape.RetainedPool(); now+scratch > mt.high.tape+mt.high.scratch {
		mt.high = peakAt{now, scratch}
	}
}

// observe is the tape's Observe: as an op records its result, the pass
// holds what the tape retains (the result included) and the op's kernel
// scratch.
func (mt *meter) observe(op autograd.Op, out *autograd.Var, in []*autograd.Var) {
	mt.sample(kernelScratch(op, out.Value, in))
}

// kernelScratch is the float32 scratch the tensor kernel of op holds
// while it writes out: an elementwise or normalising kernel decodes each
// input stored narrower than float32 and computes a narrower result in
// float32 before encoding it (masked_fill works on its result's decoded
// copy alone); a GEMM sums a matrix of a narrower result in float32 for
// its epilogue to round (Linear's rows as one matrix, MatMul's each of
// the batch's). Casts, shape ops and Record ops (op "") take none.
func kernelScratch(op autograd.Op, out *tensor.Tensor, in []*autograd.Var) int64 {
	narrow := func(t *tensor.Tensor) bool { return t.DType() != dtype.F32 && t.DType() != dtype.F64 }
	if !narrow(out) {
		return 0
	}
	switch op {
	case autograd.OpLinear:
		return tensor.ScratchBytes(out.Len())
	case autograd.OpMatMul:
		if out.DType().Bits()%8 != 0 {
			return tensor.ScratchBytes(out.Len())
		}
		return tensor.ScratchBytes(out.Dim(-2) * out.Dim(-1))
	case autograd.OpMaskedFill:
		return tensor.ScratchBytes(out.Len())
	case autograd.OpAdd, autograd.OpMul, autograd.OpGELU, autograd.OpReLU, autograd.OpSoftmax,
		autograd.OpLayerNorm, autograd.OpRMSNorm, autograd.OpSiLU, autograd.OpRotary:
		b := tensor.ScratchBytes(out.Len())
		for _, x := range in {
			if x != nil && narrow(x.Value) {
				b += tensor.ScratchBytes(x.Value.Len())
			}
		}
		return b
	}
	return 0
}

// metaPass runs m's forward and loss on the share of global that rank 0
// of devices takes, on meta tensors, in res's scopes and tensors' layout
// (nil if whole), as TrainStep runs them (with noGrad, as EvalShare does),
// and returns the pass cut at units' boundaries and the logits.
func metaPass(m Model, res *precision.Resolution, tensors *parallel.Layout, global data.Batch, devices int, noGrad bool, units []planUnit) ([]segment, *tensor.Tensor, error) {
	b, err := metaShare(global, devices)
	if err != nil {
		return nil, nil, err
	}
	mt := &meter{unitOf: map[any]int{}, fp8: map[any]bool{}}
	for i, u := range units {
		mt.unitOf[u.Module] = i
	}
	for _, s := range res.Scopes {
		if _, ok := s.Module.(*nn.Linear); ok && len(s.Converted) > 0 && slices.ContainsFunc(s.Converted, isFP8) {
			mt.fp8[s.Module] = true
		}
	}
	f := &Fabric{plugin: res.Root, plan: res, scaler: res.Scaler, scopes: res.Scoper(), meter: mt, tensors: tensors}
	f.tape.Recycle, f.tape.NoGrad = true, noGrad
	mt.tape, f.tape.Observe = &f.tape, mt.observe
	defer f.tape.Reset()
	b.X = f.Input(b.X)
	logits, err := f.forward(context.Background(), func(tp *autograd.Tape) (*autograd.Var, error) { return m.Forward(tp, b) })
	if err != nil {
		return nil, nil, err
	}
	if _, err := f.tape.CrossEntropy(logits, b.Targets); err != nil {
		return nil, nil, err
	}
	mt.cut(&f.tape, -1, 0, 0)
	return mt.segs, tensor.Meta(logits.Value.DType(), logits.Value.Shape()...), nil
}

// isFP8 reports whether the plugin called name gives Linears FP8 GEMMs
// (fp8, fp8-current, fp8-mx).
func isFP8(name string) bool { return strings.HasPrefix(name, "fp8") }

// metaShare is rank 0's share of global with its input on shapes alone.
func metaShare(global data.Batch, devices int) (data.Batch, error) {
	x := global.X
	global.X = nil
	b, err := global.Share(0, devices)
	if err != nil {
		return data.Batch{}, fmt.Errorf("fabric: plan: %w", err)
	}
	if x != nil {
		shape := slices.Clone(x.Shape())
		shape[0] /= devices
		b.X = tensor.Meta(x.DType(), shape...)
	}
	return b, nil
}

// PredictPeak predicts the allocator's peak on each rank over a training
// step on global (its shapes; values are not read) and an evaluation of a
// batch like it, and sets p.Peak. The forwards run on p's model, on meta
// tensors. Units that
// p.ActivationCheckpointing selects keep only their output from the
// forward and recompute the rest in their backward; a checkpointed module
// inside a unit is predicted as if it were not checkpointed.
func (p *Plan) PredictPeak(global data.Batch) error {
	m, ok := p.model.(Model)
	if !ok {
		return fmt.Errorf("fabric: plan: %T has no forward over a batch", p.model)
	}
	units := planUnits(m)
	micro := max(p.MicroBatches, 1)
	segs, logits, err := metaPass(m, p.res, p.tensors, global, p.Devices*micro, false, units)
	if err != nil {
		return err
	}
	eval, _, err := metaPass(m, p.res, p.tensors, global, p.Devices, true, units)
	if err != nil {
		return err
	}
	if len(p.ActivationCheckpointing) > 0 {
		selected, err := precision.Select(m, p.ActivationCheckpointing)
		if err != nil {
			return fmt.Errorf("fabric: activation checkpointing %w", err)
		}
		for i := range segs {
			segs[i].checkpointed = segs[i].unit >= 0 && selected[units[segs[i].unit].Module]
		}
	}
	sim := p.stepSim(m, units)
	p.Peak = sim.run(segs, eval, units, logits, p.Devices*max(p.TensorParallel, 1))
	return nil
}

// stepSim accounts what each parameter of m, in units, costs a rank over
// a step of the plan's strategy.
func (p *Plan) stepSim(m Model, units []planUnit) *stepSim {
	st, _ := strategy.Lookup(p.Strategy)
	state, setsState := precision.OptimizerStateDType(p.res.Root)
	sim := &stepSim{stateFormat: precision.OptimizerFormat(p.res.Root), sh: st.Sharding, n: p.shardRanks(), dist: p.Devices > 1 || st.Sharding.OptimizerState, accumulates: p.MicroBatches > 1, frozen: p.BytesPerRank.Frozen}
	unitOf := map[*autograd.Var]int{}
	for i, u := range units {
		for _, q := range u.Params {
			unitOf[q.Var] = i
		}
	}
	sim.units = make([]unitBytes, len(units))
	for _, q := range append(nn.Parameters(m), p.trained()...) {
		v := q.Var.Value
		if !q.Var.RequiresGrad() { // in p.BytesPerRank.Frozen
			continue
		}
		sd := v.DType()
		if setsState {
			sd = state
		}
		pb := sim.param(v.DType(), sd, v.Len())
		sim.add(pb)
		if i, ok := unitOf[q.Var]; ok {
			sim.units[i].add(pb)
		} else {
			sim.root.add(pb)
		}
	}
	if st.Sharding.Parameters && p.Devices > 1 { // frozen codes are gathered with their unit
		for i, u := range units {
			nn.Walk(u.Module, func(_ string, mod nn.Module) {
				for _, fz := range nn.FrozenOf(mod) {
					codes := *fz.Value
					sim.units[i].whole += tensor.PoolBytes(codes.DType(), strategy.Chunk(codes.Len(), fz.Block, p.shardRanks())*p.shardRanks())
				}
			})
		}
	}
	return sim
}

// trained is the parameters the plan's precision alone trains, if it
// names them (LoRA's adapters, outside the model's own parameters).
func (p *Plan) trained() []nn.NamedParam {
	params, _ := precision.TrainedParams(p.res.Root)
	return params
}

// paramBytes is what one parameter costs a rank, as the pool counts it.
type paramBytes struct {
	state     int64 // held between steps: value(s) and moments
	whole     int64 // made whole (FSDP gathers a padded whole)
	grad      int64 // its whole gradient
	held      int64 // its gradient once reduced, as the rank keeps it
	padded    int64 // a padded whole copy (reduce-scatter's input, zero1/zero2's all-gather)
	optimizer int64 // AdamW's decode scratch over its rank's part
}

func (b *paramBytes) add(o paramBytes) {
	b.state += o.state
	b.whole += o.whole
	b.grad += o.grad
	b.held += o.held
	b.padded = max(b.padded, o.padded)
	b.optimizer = max(b.optimizer, o.optimizer)
}

type unitBytes = paramBytes

// stepSim walks one training step as Fabric.TrainStep and strategy.Rank
// run it, tracking what the pool holds.
type stepSim struct {
	sh   strategy.Sharding
	n    int
	dist bool // a strategy.Rank runs (several ranks, or a sharded optimizer)
	// accumulates is a step of several micro-batches: the last one's
	// forward runs with the earlier ones' gradients held.
	accumulates bool
	frozen      int64
	stateFormat *lowbit.Format // of low-bit optimizer state (nil: float moments)
	all         paramBytes
	units       []unitBytes
	root        unitBytes // parameters outside every unit
}

func (s *stepSim) add(b paramBytes) { s.all.add(b) }

// param accounts a parameter of n elements stored in dt whose moments are
// stored in sd.
func (s *stepSim) param(dt, sd dtype.DType, n int) paramBytes {
	size := 1
	if s.dist {
		size = s.n
	}
	chunk := strategy.Chunk(n, strategy.ParamBlock(s.sh, stateBlock(s.stateFormat)), size)
	part := n // what the optimizer updates
	if s.sh.OptimizerState {
		part = chunk
	}
	b := paramBytes{whole: tensor.PoolBytes(dt, chunk*size), grad: tensor.PoolBytes(dt, n), padded: tensor.PoolBytes(dt, chunk*size)}
	b.state = 2 * tensor.PoolBytes(sd, part)
	if fm := s.stateFormat; fm != nil { // codes and scales, none for padding; the step decodes m and v to float32
		part = min(part, n)
		b.state = 2 * (tensor.PoolBytes(fm.CodeDType, fm.CodeBytes(part)) + tensor.PoolBytes(dtype.F32, fm.Blocks(part)))
		b.optimizer += 2 * tensor.PoolBytes(dtype.F32, part)
		sd = dtype.F32
	}
	switch {
	case s.sh.Parameters:
		b.state += tensor.PoolBytes(dt, chunk)
	case s.sh.OptimizerState: // the padded whole; the chunk views it
		b.state += tensor.PoolBytes(dt, chunk*size)
	default:
		b.state += tensor.PoolBytes(dt, n)
	}
	switch {
	case s.sh.Gradients:
		b.held = tensor.PoolBytes(dt, chunk)
	case s.sh.OptimizerState && chunk*size != n: // padded so that the chunk's gradient views it
		b.held = tensor.PoolBytes(dt, chunk*size)
	default:
		b.held = b.grad
	}
	for _, d := range []dtype.DType{dt, dt, sd, sd} { // p, g, m, v decoded when not float32
		if d != dtype.F32 && d != dtype.F64 {
			b.optimizer += tensor.ScratchBytes(part)
		}
	}
	return b
}

// run predicts the peak over the forward (segs, in order), the loss, the
// backward (segs reversed), the optimizer step and an evaluation's forward
// (eval) after it.
func (s *stepSim) run(segs, eval []segment, units []planUnit, logits *tensor.Tensor, ranks int) *Peak {
	base := Peak{State: s.all.state + s.frozen}
	for _, sg := range segs {
		base.Saved += sg.kept()
	}
	w := &walk{stepSim: s, modules: units, best: base, ranks: ranks}
	p := base
	p.Gathered = w.rootWhole()
	if s.accumulates {
		p.Grads = s.all.held
	}
	p = w.forward("forward", segs, p)
	w.loss(p, logits)
	p = w.backward(segs, p)
	if !s.accumulates { // the root's gradients, reduced last
		p.Grads += s.root.held
	}
	p.Gathered, p.Transient, p.Scratch = 0, 0, s.all.optimizer
	w.consider("optimizer step", p)
	if s.sh.OptimizerState && !s.sh.Parameters { // zero1/zero2 gather each updated parameter
		q := base
		q.Transient = s.all.padded
		w.consider("after step", q)
	}
	p = base
	p.Gathered = w.rootWhole()
	w.forward("evaluation", eval, p)
	w.best.Process, w.best.RanksInProcess = w.process, ranks
	w.best.ProcessMost = int64(ranks) * w.best.Bytes
	return &w.best
}

// walk is a stepSim's walk through a step: the most the pool holds, and
// at what.
type walk struct {
	*stepSim
	modules []planUnit // the units' modules, for the moments' names
	best    Peak
	// process is the most a process of ranks holds (Peak.Process).
	ranks   int
	process int64
}

// consider keeps p, what the pool holds at, if it is the most yet.
func (w *walk) consider(at string, p Peak) {
	p.At, p.Bytes = at, p.State+p.Grads+p.Gathered+p.Activations+p.Transient+p.Scratch
	if p.Bytes > w.best.Bytes {
		w.best = p
	}
	w.process = max(w.process, p.inProcess(w.ranks))
}

// whole is unit i's parameters made whole, under FSDP.
func (w *walk) whole(i int) int64 {
	if !w.sh.Parameters || i < 0 || i >= len(w.units) {
		return 0
	}
	return w.units[i].whole
}

// rootWhole is the parameters outside every unit made whole, under FSDP,
// for the whole pass.
func (w *walk) rootWhole() int64 {
	if !w.sh.Parameters {
		return 0
	}
	return w.root.whole
}

// forward walks a forward pass from p: each segment at its fullest, a
// unit whole with the next one's gather in flight. It returns p with what
// the pass leaves.
func (w *walk) forward(what string, segs []segment, p Peak) Peak {
	for _, sg := range segs {
		q := p
		q.Activations += sg.high - sg.scratch // its results until its scope closes
		q.Scratch = sg.scratch
		at := what
		if sg.unit >= 0 {
			q.Gathered += w.whole(sg.unit) + w.whole(sg.unit+1)
			at += " of " + w.modules[sg.unit].Path
		}
		w.consider(at, q)
		p.Activations += sg.kept()
	}
	return p
}

// loss is the loss over the global batch after the forward left p: every
// rank's logits gathered.
func (w *walk) loss(p Peak, logits *tensor.Tensor) {
	if !w.dist || w.n <= 1 {
		return
	}
	rows := logits.Len() * w.n
	p.Transient = tensor.PoolBytes(logits.DType(), rows)
	if logits.DType() != dtype.F32 && logits.DType() != dtype.F64 {
		p.Transient += tensor.ScratchBytes(rows)
	}
	w.consider("loss", p)
}

// backward walks the backward from p, what the forward left: a unit's
// gradients are made while its activations are still held (a
// checkpointed unit's recomputed first), then reduced; FSDP holds it whole
// with the one before it prefetched. It returns p with the gradients held.
func (w *walk) backward(segs []segment, p Peak) Peak {
	for k := len(segs) - 1; k >= 0; k-- {
		sg := segs[k]
		q := p
		if sg.unit < 0 {
			q.Transient = sg.act // the gradients of its results
			w.consider("backward", q)
			p.Activations -= sg.kept()
			continue
		}
		u, path := w.units[sg.unit], w.modules[sg.unit].Path
		q.Gathered += w.whole(sg.unit) + w.whole(sg.unit-1)
		if sg.checkpointed { // its forward again, its output's gradient waiting
			r := q
			r.Activations += sg.high - sg.scratch
			r.Transient, r.Scratch = sg.out, sg.scratch
			w.consider("recompute of "+path, r)
		}
		q.Activations += sg.act - sg.kept() // recomputed
		q.Transient, q.Scratch = u.grad+sg.io+sg.work, sg.fp8
		w.consider("backward of "+path, q)
		if w.sh.Gradients || (w.sh.OptimizerState && u.held != u.grad) {
			q.Activations -= sg.act
			q.Transient, q.Scratch = u.grad+u.padded, 0
			w.consider("reduction of "+path, q)
		}
		if !w.accumulates {
			p.Grads += u.held
		}
		p.Activations -= sg.kept()
	}
	return p
}

package fabric

import (
	"cmp"
	"slices"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim/lowbit"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/strategy"
)

// Traffic is what one rank of a plan's strategy sends in a training step,
// split by where its peers run as comm.Stats splits it (InsideHost,
// BetweenHosts): the parameter gathers and gradient reductions, not the
// loss, the agreements or a mesh row's tensor-parallel traffic.
type Traffic struct {
	RanksPerHost int   `json:"ranks_per_host"` // ranks of the run on each host, mesh rows whole
	InsideHost   int64 `json:"inside_host"`
	BetweenHosts int64 `json:"between_hosts"`
	// Gathers and Reductions split that between the parameter
	// all-gathers (FSDP's before each use, ZeRO's after the step) and
	// the gradient reductions, by the dtype they travel in, largest
	// first.
	Gathers    []DTypeTraffic `json:"gathers,omitempty"`
	Reductions []DTypeTraffic `json:"reductions,omitempty"`
}

// DTypeTraffic is what travels in one dtype: the parameter elements and
// the bytes a rank sends of them in a step, to every host (FP8 scales
// count under float32, beside their codes).
type DTypeTraffic struct {
	DType  string `json:"dtype"`
	Params int64  `json:"params"`
	Bytes  int64  `json:"bytes"`
}

// addTo adds params elements and bytes in dt to list.
func addTo(list []DTypeTraffic, dt dtype.DType, params, bytes int64) []DTypeTraffic {
	i := slices.IndexFunc(list, func(d DTypeTraffic) bool { return d.DType == dt.String() })
	if i < 0 {
		i, list = len(list), append(list, DTypeTraffic{DType: dt.String()})
	}
	list[i].Params += params
	list[i].Bytes += bytes
	return list
}

// byParams orders list by its params, most first.
func byParams(list []DTypeTraffic) {
	slices.SortStableFunc(list, func(a, b DTypeTraffic) int { return cmp.Compare(b.Params, a.Params) })
}

// ShardWithin tells the plan of a hybrid strategy (hsdp) that its state
// is split over shard groups of size data-parallel ranks, not over them all.
func (p *Plan) ShardWithin(size int) {
	st, err := strategy.Lookup(p.Strategy)
	if err != nil || !st.Hybrid {
		return
	}
	p.ShardSize = size
	p.account(st.Sharding, size)
}

// shardRanks is the ranks a sharded strategy splits state over: hsdp's
// shard group, else every data-parallel rank.
func (p *Plan) shardRanks() int { return cmp.Or(p.ShardSize, p.Devices) }

// PredictTraffic predicts each rank's Traffic over a step, with
// ranksPerHost ranks on each host (the run's consecutive ranks, a mesh's
// rows whole) and FSDP's units gathered again for their backward unless
// keepAfterForward.
func (p *Plan) PredictTraffic(ranksPerHost int, keepAfterForward bool) {
	st, _ := strategy.Lookup(p.Strategy)
	n, micro := p.Devices, max(p.MicroBatches, 1)
	t := &Traffic{RanksPerHost: ranksPerHost}
	p.Traffic = t
	if n == 1 {
		return
	}
	// The data-parallel ranks of a mesh column on each host, consecutive.
	perHost := max(1, min(n, ranksPerHost/max(p.TensorParallel, 1)))
	shard := n
	if p.ShardSize > 0 {
		shard = p.ShardSize
	}
	gathers := int64(micro) * 2 // forward, and backward again
	if keepAfterForward {
		gathers = int64(micro)
	}
	reductions := int64(1) // ddp and zero1 reduce the accumulated gradients once
	if st.Sharding.Gradients {
		reductions = int64(micro)
	}
	sent := exchange{t: t, n: shard, onHost: min(shard, perHost)}
	replicas := exchange{t: t, n: n / shard, onHost: max(1, min(n/shard, perHost/shard))}
	paramBlock := strategy.ParamBlock(st.Sharding, stateBlock(precision.OptimizerFormat(p.res.Root)))
	for _, par := range p.params() {
		block := par.block
		if !par.frozen {
			block = paramBlock
		}
		chunk := int64(strategy.Chunk(par.elems, block, shard))
		switch {
		case st.Sharding.Parameters && par.parts[0] > 0 && chunk*int64(par.wire.Bits())%8 == 0: // codes, as the strategy sends them
			t.Gathers = addTo(t.Gathers, par.wire, int64(par.elems), sent.add(int64(micro*p.codedParts(par, keepAfterForward)), chunk*int64(par.wire.Bits())/8))
		case st.Sharding.Parameters && par.parts[0] > 0:
			t.Gathers = addTo(t.Gathers, par.stored, int64(par.elems), sent.add(gathers, chunk*int64(par.stored.Bits())/8))
		case st.Sharding.Parameters:
			t.Gathers = addTo(t.Gathers, par.wire, int64(par.elems), sent.add(gathers, chunk*int64(par.wire.Bits())/8))
			if par.scale > 0 {
				t.Gathers = addTo(t.Gathers, dtype.F32, 0, sent.add(gathers, par.scale))
			}
		case st.Sharding.OptimizerState && par.trains:
			t.Gathers = addTo(t.Gathers, par.stored, int64(par.elems), sent.add(1, chunk*int64(par.stored.Bits())/8)) // the updated chunks, after the step
		}
		if !par.trains {
			continue
		}
		grad := chunk * int64(par.reduced.Bits()) / 8
		var b int64
		switch {
		case st.Sharding.Gradients:
			b = sent.add(reductions, grad) + replicas.add(reductions, 2*grad/int64(replicas.n))
		default:
			b = sent.add(reductions, 2*grad)
		}
		t.Reductions = addTo(t.Reductions, par.reduced, int64(par.elems), b)
	}
	byParams(t.Gathers)
	byParams(t.Reductions)
}

// stateBlock is the block of the low-bit optimizer state fm, 0 for none.
func stateBlock(fm *lowbit.Format) int {
	if fm == nil {
		return 0
	}
	return fm.Block
}

// codedParts is how many casts of par a step's gathers send: the
// forward's, then the backward's (with the forward's again for a
// checkpointed forward's recompute), or both at once when units are kept
// from forward to backward.
func (p *Plan) codedParts(par planParam, keepAfterForward bool) int {
	switch {
	case keepAfterForward:
		return par.parts[2]
	case len(p.ActivationCheckpointing) > 0:
		return par.parts[0] + par.parts[2]
	}
	return par.parts[0] + par.parts[1]
}

// exchange counts what a rank sends to each peer of a group of n ranks,
// onHost of them (itself included) on its host.
type exchange struct {
	t         *Traffic
	n, onHost int
}

// add counts times a collective sending each peer bytes, and returns
// what that sends in all.
func (e exchange) add(times, bytes int64) int64 {
	if e.n <= 1 {
		return 0
	}
	in, out := times*bytes*int64(e.onHost-1), times*bytes*int64(e.n-e.onHost)
	e.t.InsideHost += in
	e.t.BetweenHosts += out
	return in + out
}

// planParam is what a strategy moves of one parameter or frozen weight.
type planParam struct {
	elems        int
	frozen       bool        // a frozen weight's codes (nn.Frozen), split in whole blocks of block
	block        int         // a frozen weight's; a parameter's is the strategy's (strategy.ParamBlock)
	stored, wire dtype.DType // its storage, and its gathers' format
	reduced      dtype.DType // its gradient's reductions
	scale        int64       // bytes of an FP8 gather's scale
	trains       bool
	// parts are the casts of a weight its plugin sends as codes
	// (strategy.Comms.Codec) for the forward's GEMMs, the backward's, and
	// both at once; 0 if it sends none.
	parts [3]int
}

// params lists the plan's parameters and frozen weights (their codes, in
// whole blocks), as the strategy shards them.
func (p *Plan) params() []planParam {
	var out []planParam
	tied := tiedParams(p.res)
	for _, s := range p.res.Scopes {
		for _, fz := range nn.FrozenOf(s.Module) {
			codes := *fz.Value
			out = append(out, planParam{elems: codes.Len(), block: fz.Block, stored: codes.DType(), wire: codes.DType(), frozen: true})
		}
		for _, q := range s.Module.Params() {
			v := q.Var.Value
			par := planParam{elems: v.Len(), stored: v.DType(), wire: v.DType(), reduced: v.DType(), trains: q.Var.RequiresGrad()}
			if dt, scale, ok := gatherFormat(s, q, tied); ok {
				par.wire = dt
				if scale != 0 {
					par.scale = 4 // a float32 beside the codes
				}
			}
			if c := gatherCodec(s, q, strategy.ForwardGEMMs); c != nil {
				par.wire = c.DType()
				for i, g := range []strategy.GEMMs{strategy.ForwardGEMMs, strategy.BackwardGEMMs, strategy.ForwardGEMMs | strategy.BackwardGEMMs} {
					par.parts[i] = gatherCodec(s, q, g).Parts()
				}
			}
			if dt, ok := precision.ReduceDType(s.Plugin, nn.Join(s.Path, q.Name)); ok {
				par.reduced = dt
			}
			out = append(out, par)
		}
	}
	return out
}

package fabric

import (
	"cmp"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
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
	for _, par := range p.params() {
		chunk := int64(strategy.Chunk(par.elems, par.block, shard))
		switch {
		case st.Sharding.Parameters:
			sent.add(gathers, chunk*int64(par.wire.Bits())/8+par.scale)
		case st.Sharding.OptimizerState && par.trains:
			sent.add(1, chunk*int64(par.stored.Bits())/8) // the updated chunks, after the step
		}
		if !par.trains {
			continue
		}
		grad := chunk * int64(par.stored.Bits()) / 8
		switch {
		case st.Sharding.Gradients:
			sent.add(reductions, grad)
			replicas.add(reductions, 2*grad/int64(replicas.n))
		default:
			sent.add(reductions, 2*grad)
		}
	}
}

// exchange counts what a rank sends to each peer of a group of n ranks,
// onHost of them (itself included) on its host.
type exchange struct {
	t         *Traffic
	n, onHost int
}

// add counts times a collective sending each peer bytes.
func (e exchange) add(times, bytes int64) {
	if e.n <= 1 {
		return
	}
	e.t.InsideHost += times * bytes * int64(e.onHost-1)
	e.t.BetweenHosts += times * bytes * int64(e.n-e.onHost)
}

// planParam is what a strategy moves of one parameter or frozen weight.
type planParam struct {
	elems, block int
	stored, wire dtype.DType // its storage, and its gathers' format
	scale        int64       // bytes of an FP8 gather's scale
	trains       bool
}

// params lists the plan's parameters and frozen weights (their codes, in
// whole blocks), as the strategy shards them.
func (p *Plan) params() []planParam {
	var out []planParam
	for _, s := range p.res.Scopes {
		for _, fz := range nn.FrozenOf(s.Module) {
			codes := *fz.Value
			out = append(out, planParam{elems: codes.Len(), block: fz.Block, stored: codes.DType(), wire: codes.DType()})
		}
		for _, q := range s.Module.Params() {
			v := q.Var.Value
			par := planParam{elems: v.Len(), block: 1, stored: v.DType(), wire: v.DType(), trains: q.Var.RequiresGrad()}
			if dt, _, ok := precision.GatherFormat(s.Plugin, nn.Join(s.Path, q.Name)); ok {
				par.wire, par.scale = dt, 4
			}
			out = append(out, par)
		}
	}
	return out
}

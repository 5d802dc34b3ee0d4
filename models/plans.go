package models

import "github.com/weftml/weft/parallel"

// GPTPlan is Megatron-LM's tensor-parallel layout of a GPT: attention split
// by heads (the fused q|k|v projection column-parallel, part by part, the
// output projection row-parallel) and the MLP's fc column-parallel, its out
// row-parallel. Embeddings, LayerNorms and the head stay replicated.
var GPTPlan = parallel.Plan{
	"blocks.*.qkv":  parallel.Colwise{Parts: 3},
	"blocks.*.proj": parallel.Rowwise{},
	"blocks.*.fc":   parallel.Colwise{},
	"blocks.*.out":  parallel.Rowwise{},
}

// LlamaPlan is Megatron-LM's layout of a Llama: attention split by
// key/value heads (q, k and v column-parallel, each rank keeping its
// key/value heads and the query heads that share them; o row-parallel)
// and the SwiGLU MLP's gate and up column-parallel, down row-parallel.
// Embeddings, RMSNorms and the head stay replicated.
var LlamaPlan = parallel.Plan{
	"blocks.*.q":    parallel.Colwise{},
	"blocks.*.k":    parallel.Colwise{},
	"blocks.*.v":    parallel.Colwise{},
	"blocks.*.o":    parallel.Rowwise{},
	"blocks.*.gate": parallel.Colwise{},
	"blocks.*.up":   parallel.Colwise{},
	"blocks.*.down": parallel.Rowwise{},
}

// GPTSequencePlan is GPTPlan with Megatron-LM's sequence parallelism:
// the embeddings' sum is cut to each rank's share of the sequence, the
// LayerNorms and residual adds run on shares, each column-parallel Linear
// all-gathers its input and each row-parallel one reduce-scatters its
// output, and ln_f's output is gathered whole for the replicated head.
var GPTSequencePlan = parallel.Plan{
	"tok":           parallel.Scatter{},
	"pos":           parallel.Scatter{},
	"blocks.*.ln1":  parallel.Sequence{},
	"blocks.*.qkv":  parallel.Colwise{Parts: 3, Sequence: true},
	"blocks.*.proj": parallel.Rowwise{Sequence: true},
	"blocks.*.ln2":  parallel.Sequence{},
	"blocks.*.fc":   parallel.Colwise{Sequence: true},
	"blocks.*.out":  parallel.Rowwise{Sequence: true},
	"ln_f":          parallel.Sequence{Gather: true},
}

// LlamaSequencePlan is LlamaPlan with sequence parallelism, as
// GPTSequencePlan. q, k and v (and gate and up) are separate Linears, so
// each gathers its input: five all-gathers a block where fused
// projections would need two.
var LlamaSequencePlan = parallel.Plan{
	"tok":                parallel.Scatter{},
	"blocks.*.attn_norm": parallel.Sequence{},
	"blocks.*.q":         parallel.Colwise{Sequence: true},
	"blocks.*.k":         parallel.Colwise{Sequence: true},
	"blocks.*.v":         parallel.Colwise{Sequence: true},
	"blocks.*.o":         parallel.Rowwise{Sequence: true},
	"blocks.*.mlp_norm":  parallel.Sequence{},
	"blocks.*.gate":      parallel.Colwise{Sequence: true},
	"blocks.*.up":        parallel.Colwise{Sequence: true},
	"blocks.*.down":      parallel.Rowwise{Sequence: true},
	"norm":               parallel.Sequence{Gather: true},
}

// prefixed is plan with every pattern under prefix.
func prefixed(prefix string, plan parallel.Plan) parallel.Plan {
	out := parallel.Plan{}
	for p, s := range plan {
		out[prefix+p] = s
	}
	return out
}

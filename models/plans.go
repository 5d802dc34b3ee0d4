package models

import (
	"fmt"
	"slices"
	"strings"

	"github.com/weftml/weft/parallel"
)

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

// plans are the tensor-parallel layouts of the models that have one.
var plans = map[string]parallel.Plan{
	"gpt":    GPTPlan,
	"llama":  LlamaPlan,
	"hybrid": prefixed("decoder.", GPTPlan), // the vision encoder stays replicated
}

// TensorPlan is the tensor-parallel layout of the reference model called
// name.
func TensorPlan(name string) (parallel.Plan, error) {
	p, ok := plans[name]
	if !ok {
		names := make([]string, 0, len(plans))
		for n := range plans {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, fmt.Errorf("model %q has no tensor-parallel plan (models with one: %s)", name, strings.Join(names, ", "))
	}
	return p, nil
}

// prefixed is plan with every pattern under prefix.
func prefixed(prefix string, plan parallel.Plan) parallel.Plan {
	out := parallel.Plan{}
	for p, s := range plan {
		out[prefix+p] = s
	}
	return out
}

// Package strategy decides where parameters, gradients and optimizer state
// live across ranks. Strategies ask precision for roles (storage, compute,
// communication dtypes), never for a plugin type.
package strategy

import (
	"fmt"
	"strings"
)

// Sharding says which training state a strategy splits across ranks
// rather than replicating; the ZeRO stages are its three prefixes.
type Sharding struct {
	OptimizerState bool // ZeRO-1 and up
	Gradients      bool // ZeRO-2 and up
	Parameters     bool // ZeRO-3 (FSDP)
}

// Info describes a strategy.
type Info struct {
	Name     string
	Sharding Sharding
	Doc      string
	// Hybrid shards within groups of ranks (Options.Hybrid) and
	// replicates across them (hsdp).
	Hybrid bool
}

// CheckRanks reports a number of data-parallel ranks the strategy cannot
// run on: single runs on one.
func (i Info) CheckRanks(ranks int) error {
	if i.Name == "single" && ranks > 1 {
		return fmt.Errorf("strategy single runs on one device, not %d; ddp, zero1, zero2, fsdp and hsdp run on several", ranks)
	}
	return nil
}

// strategies are weft's strategies in order of how much they shard.
var strategies = []Info{
	{"single", Sharding{}, "one rank holds everything", false},
	{"ddp", Sharding{}, "replicated parameters, all-reduced gradients", false},
	{"zero1", Sharding{OptimizerState: true}, "optimizer state sharded", false},
	{"zero2", Sharding{OptimizerState: true, Gradients: true}, "gradients and optimizer state sharded", false},
	{"fsdp", Sharding{OptimizerState: true, Gradients: true, Parameters: true}, "ZeRO-3: parameters, gradients and optimizer state sharded", false},
	{"hsdp", Sharding{OptimizerState: true, Gradients: true, Parameters: true}, "hybrid: fsdp within groups of --shard-size ranks (a host's), gradients all-reduced across the groups", true},
}

// Names lists the strategies.
func Names() []string {
	out := make([]string, len(strategies))
	for i, s := range strategies {
		out[i] = s.Name
	}
	return out
}

// Lookup returns the strategy called name ("auto" is "single").
func Lookup(name string) (Info, error) {
	if name == "auto" || name == "" {
		name = "single"
	}
	for _, s := range strategies {
		if s.Name == name {
			return s, nil
		}
	}
	return Info{}, fmt.Errorf("unknown strategy %q (accepted: %s)", name, strings.Join(Names(), ", "))
}

// ParamBlock is the block a strategy sharded as sh cuts a parameter in:
// the optimizer state's block, stateBlock (Options.StateBlock; 0 for
// none), when it shards optimizer state, else 1.
func ParamBlock(sh Sharding, stateBlock int) int {
	if sh.OptimizerState && stateBlock > 0 {
		return stateBlock
	}
	return 1
}

// Chunk is the elements each of n ranks holds of a tensor of elems
// elements split in whole blocks of block elements (a quantized weight's;
// 1 for a parameter), the last chunk zero-padded to the same length.
func Chunk(elems, block, n int) int {
	blocks := (elems + block - 1) / block
	return (blocks + n - 1) / n * block
}

// PerRank returns the bytes one of n ranks holds of a tensor of total
// bytes: all of it when replicated, else its ceil(1/n) shard (every shard
// is padded to the same length, as FSDP's flat parameters are).
func PerRank(total int64, sharded bool, n int) int64 {
	if !sharded || n <= 1 {
		return total
	}
	return (total + int64(n) - 1) / int64(n)
}

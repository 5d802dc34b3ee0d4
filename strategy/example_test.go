package strategy_test

import (
	"fmt"

	"github.com/weftml/weft/strategy"
)

// The ZeRO stages are prefixes of what a strategy shards: zero1 the
// optimizer state, zero2 the gradients too, fsdp the parameters as well.
func ExampleLookup() {
	for _, name := range []string{"ddp", "zero1", "zero2", "fsdp"} {
		info, err := strategy.Lookup(name)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%-5s %+v\n", name, info.Sharding)
	}
	// Output:
	// ddp   {OptimizerState:false Gradients:false Parameters:false}
	// zero1 {OptimizerState:true Gradients:false Parameters:false}
	// zero2 {OptimizerState:true Gradients:true Parameters:false}
	// fsdp  {OptimizerState:true Gradients:true Parameters:true}
}

// A sharded tensor is split into equal chunks, the last zero-padded; a
// quantized weight is split in whole blocks of its codes (nf4's 64).
func ExampleChunk() {
	fmt.Println(strategy.Chunk(10, 1, 4), strategy.Chunk(4096, 64, 3))
	// Output: 3 1408
}

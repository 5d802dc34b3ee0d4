package main

import (
	"log"
	"os"
)

// Two fsdp ranks in bf16-mixed each hold half of every parameter, and the
// gpt learns the text: the validation loss, over the global batches as
// one device computes it, falls by more than half.
func Example() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
	// Output:
	// each rank holds half of the parameters: true
	// validation loss fell by more than half: true
}

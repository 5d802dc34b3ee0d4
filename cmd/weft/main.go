// Command weft trains neural networks with composable precision.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/train"
)

func main() {
	// The Go runtime's default GOGC (100) stands: the tensor pool makes a
	// steady training step allocate next to nothing, so GOGC=400 no longer
	// saves time (60 steps of the default gpt: 1.82 s either way) and only
	// let garbage grow to 5× the live heap (peak RSS of the 25M gpt under
	// fsdp on 4 ranks, bf16-true+nf4-dq: 335 MiB at 400, 222 MiB at 100).
	if err := newRoot().Execute(); err != nil {
		// A run stopped by a signal has reported so, once, in its summary.
		if !errors.As(err, new(*train.StoppedError)) {
			fmt.Fprintln(os.Stderr, "weft:", err)
		}
		os.Exit(exitCode(err))
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "weft",
		Short:         "Train neural networks with composable precision",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(trainCmd(), parityCmd(), planCmd(), sampleCmd(), inspectCmd(), benchCmd(), compareCmd(), quantizeCmd(), consolidateCmd(), exportCmd())
	return root
}

// exitCode is 2 for a precision composition whose plugins genuinely
// conflict (a usage error), 128 + the signal for a run that a signal
// stopped (130 for SIGINT, 143 for SIGTERM), 1 for anything else.
func exitCode(err error) int {
	var conflict *precision.ConflictError
	if errors.As(err, &conflict) {
		return 2
	}
	if code, ok := signalCode(err); ok {
		return code
	}
	return 1
}

// Command weft trains neural networks with composable precision.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "weft:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "weft",
		Short:         "Train neural networks with composable precision",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(trainCmd(), parityCmd())
	return root
}

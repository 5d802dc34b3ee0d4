package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/weftml/weft/train"
)

func consolidateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "consolidate RUN OUT.safetensors",
		Short: "Join a sharded checkpoint into one safetensors file",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := train.Consolidate(args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "wrote", args[1])
			return nil
		},
	}
}

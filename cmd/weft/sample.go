package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/weftml/weft/models/hf"
	"github.com/weftml/weft/train"
)

func sampleCmd() *cobra.Command {
	var (
		run, prompt string
		n           int
		temperature float64
		seed        uint64
	)
	cmd := &cobra.Command{
		Use:   "sample",
		Short: "Generate text with a trained gpt",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if hf.IsModelDir(run) {
				return fmt.Errorf("sample: %s is an HF model folder, and --ckpt takes a weft train run folder (its --out): fine-tune from it with weft train --init-from %s, then sample that run", run, run)
			}
			text, err := train.Sample(run, prompt, n, temperature, seed)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), text)
			return nil
		},
	}
	cmd.Flags().StringVar(&run, "ckpt", "runs/gpt", "run folder of a weft train gpt run")
	cmd.Flags().StringVar(&prompt, "prompt", "func ", "text to continue")
	cmd.Flags().IntVar(&n, "n", 200, "tokens to generate (characters with a byte-level vocabulary)")
	cmd.Flags().Float64Var(&temperature, "temperature", 0.8, "sampling temperature (0: greedy)")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "sampling seed")
	return cmd
}

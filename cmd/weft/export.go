package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/weftml/weft/models/hf"
	"github.com/weftml/weft/train"
)

func exportCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "export RUN OUT",
		Short: "Write a run's latest weights as an HF model folder (config.json + model.safetensors)",
		Long: `Export writes the latest weights of a gpt or llama run to the folder OUT in
Hugging Face's layout: a gpt as GPT-2 (GPT2LMHeadModel's names, Conv1D weights),
a llama as Llama (LlamaForCausalLM's). transformers loads the folder, and
weft train --init-from OUT starts from it.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "" && !slices.Contains(hf.Formats, format) {
				return fmt.Errorf("--format %q: accepted are %s", format, strings.Join(hf.Formats, ", "))
			}
			if err := train.Export(args[0], format, args[1]); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "wrote", args[1])
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "", "layout: gpt2 (a gpt run) or llama (a llama run); empty: the run's own")
	return cmd
}

package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/weftml/weft/train"
)

func exportCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "export RUN OUT",
		Short: "Write a run's latest weights as an HF model folder (config.json + model.safetensors) or its LoRA adapters for PEFT",
		Long: `Export writes the latest weights of a gpt or llama run to the folder OUT in
Hugging Face's layout: a gpt as GPT-2 (GPT2LMHeadModel's names, Conv1D weights),
a llama as Llama (LlamaForCausalLM's). transformers loads the folder, and
weft train --init-from OUT starts from it. Quantized (nf4, int8) weights are
dequantized, and LoRA adapters merged into the weights they adapt
(W + (alpha/r)·B·A).

--format peft writes a LoRA run's adapters alone, as PEFT saves them
(adapter_config.json and adapter_model.safetensors, which PeftModel.from_pretrained
loads), and the model they adapt, dequantized and unmerged, in OUT/base, which
the adapter config names as base_model_name_or_path.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "" && !slices.Contains(train.ExportFormats, format) {
				return fmt.Errorf("--format %q: accepted are %s", format, strings.Join(train.ExportFormats, ", "))
			}
			if err := train.Export(args[0], format, args[1]); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "wrote", args[1])
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "", "layout: gpt2 (a gpt run), llama (a llama run) or peft (a LoRA run's adapters); empty: the run's own")
	return cmd
}

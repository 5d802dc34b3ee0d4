package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/parity"
	"github.com/weftml/weft/models"
)

func trainCmd() *cobra.Command {
	var (
		refs, model string
		steps       int
	)
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train a model and print its loss at every step",
		Long:  `train trains a reference model in float32 on the bundled reference data.`,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if steps < 1 {
				return fmt.Errorf("--steps %d: must be at least 1", steps)
			}
			ref, err := models.LoadReference(models.ReferenceDir(refs))
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			_, err = parity.Train(ref, model, steps, dtype.F32, func(step int, loss float64) {
				fmt.Fprintf(out, "step %4d  loss %.6f\n", step, loss)
			})
			return err
		},
	}
	cmd.Flags().StringVar(&refs, "refs", models.DefaultReferenceDir, "reference data folder")
	cmd.Flags().StringVar(&model, "model", "gpt", "model: "+fmt.Sprint(models.Names()))
	cmd.Flags().IntVar(&steps, "steps", 200, "optimizer steps")
	return cmd
}

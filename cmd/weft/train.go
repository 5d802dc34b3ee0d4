package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/weftml/weft/internal/parity"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/precision"
)

func trainCmd() *cobra.Command {
	var (
		refs, model, spec string
		steps             int
	)
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train a model and print its loss at every step",
		Long:  `train trains a reference model on the bundled reference data.`,
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
			p, err := precision.Parse(spec, precision.Options{Warn: func(msg string) { fmt.Fprintln(cmd.ErrOrStderr(), "weft: warning:", msg) }})
			if err != nil {
				return err
			}
			_, err = parity.Train(ref, model, steps, p, func(step int, loss float64) {
				fmt.Fprintf(out, "step %4d  loss %.6f\n", step, loss)
			})
			return err
		},
	}
	cmd.Flags().StringVar(&refs, "refs", models.DefaultReferenceDir, "reference data folder")
	cmd.Flags().StringVar(&model, "model", "gpt", "model: "+fmt.Sprint(models.Names()))
	cmd.Flags().StringVar(&spec, "precision", "32-true", "precision spec: "+strings.Join(precision.Specs(), ", "))
	cmd.Flags().IntVar(&steps, "steps", 200, "optimizer steps")
	return cmd
}

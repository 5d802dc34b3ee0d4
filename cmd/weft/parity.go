package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/internal/parity"
	"github.com/weftml/weft/models"
)

func parityCmd() *cobra.Command {
	var (
		refs, model, dt string
		asJSON          bool
	)
	cmd := &cobra.Command{
		Use:   "parity",
		Short: "Replay a PyTorch reference run and compare every step",
		Long: `parity loads a model's initial weights and data from DIR/refs.safetensors,
trains the reference schedule and prints each step's loss. Without --json it
compares against DIR/trajectories.json and fails on a mismatch, saying where.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := dtype.Parse(dt)
			if err != nil {
				return err
			}
			target, ok := parity.Targets[d]
			if !ok {
				return fmt.Errorf("--dtype %s: accepted are float64 and float32", dt)
			}
			dir := models.ReferenceDir(refs)
			ref, err := models.LoadReference(dir)
			if err != nil {
				return err
			}
			traj, err := parity.LoadTrajectories(dir)
			if err != nil {
				return err
			}
			steps := traj.Models[model].Steps
			if steps == 0 {
				return fmt.Errorf("model %q has no runs in %s/trajectories.json (models: %v)", model, dir, traj.ModelNames())
			}
			res, err := parity.Train(ref, model, steps, d, nil)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(out).Encode(res)
			}
			for s, l := range res.Losses {
				fmt.Fprintf(out, "step %3d  loss %.9f\n", s, float64(l))
			}
			run, ok := traj.Models[model].Runs[target.Run]
			if !ok {
				return fmt.Errorf("no %s run of %s to compare with", target.Run, model)
			}
			if err := parity.CompareLosses(res.Losses, run.Losses, target.Tol); err != nil {
				return fmt.Errorf("%s %s differs from PyTorch's %s run: %w", model, d, target.Run, err)
			}
			fmt.Fprintf(out, "%s %s matches PyTorch's %s run: %d steps within %.0g relative\n", model, d, target.Run, len(res.Losses), target.Tol)
			return nil
		},
	}
	cmd.Flags().StringVar(&refs, "refs", models.DefaultReferenceDir, "reference folder (WEFT_REFERENCE_DIR overrides the default)")
	cmd.Flags().StringVar(&model, "model", "mlp", "reference model: "+fmt.Sprint(models.Names()))
	cmd.Flags().StringVar(&dt, "dtype", "float32", "float64 or float32")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of comparing")
	return cmd
}

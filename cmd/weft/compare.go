package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/weftml/weft/train"
)

func compareCmd() *cobra.Command {
	var png string
	cmd := &cobra.Command{
		Use:   "compare RUN RUN...",
		Short: "Compare the final losses of training runs and plot them together",
		Long: `compare reads the metrics.jsonl of each run folder, prints each run's final
train and validation loss relative to the first run's, and draws all their
loss curves into one PNG.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, runs []string) error {
			finals, err := train.FinalLosses(runs)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			base := finals[0]
			for i, f := range finals {
				fmt.Fprintf(out, "%-24s step %5d  val %.4f (%+.2f%%)  train(last 10) %.4f (%+.2f%%)\n", runs[i], f.Step,
					f.Val, 100*(f.Val-base.Val)/base.Val, f.Train, 100*(f.Train-base.Train)/base.Train)
			}
			files := make([]string, len(runs))
			for i, r := range runs {
				files[i] = filepath.Join(r, "metrics.jsonl")
			}
			if png == "" { // beside the runs, not in the working directory
				png = filepath.Join(filepath.Dir(filepath.Clean(runs[0])), "compare.png")
			}
			if err := train.PlotRuns(png, files...); err != nil {
				return err
			}
			fmt.Fprintln(out, "plot", png)
			return nil
		},
	}
	cmd.Flags().StringVar(&png, "png", "", "where to draw the loss curves (default: compare.png in the first run's parent folder)")
	return cmd
}

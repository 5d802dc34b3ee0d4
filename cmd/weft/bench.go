package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/weftml/weft/internal/bench"
)

// benchReport is `weft bench --json`'s object; a sub-benchmark fills only its part.
type benchReport struct {
	GEMM []bench.GEMMResult `json:"gemm,omitempty"`
	Step []bench.StepResult `json:"step,omitempty"`
}

func benchCmd() *cobra.Command {
	var (
		asJSON             bool
		sizes, mods, precs string
		steps              int
		minTime            time.Duration
	)
	cmd := &cobra.Command{
		Use:       "bench [gemm|step]",
		Short:     "Measure GEMM speed (beside OpenBLAS) and training-step time per precision",
		Args:      cobra.MaximumNArgs(1),
		ValidArgs: []string{"gemm", "step"},
		RunE: func(cmd *cobra.Command, args []string) error {
			which := "all"
			if len(args) == 1 {
				which = args[0]
			}
			if which != "all" && which != "gemm" && which != "step" {
				return fmt.Errorf("bench %q: accepted are gemm and step", which)
			}
			var rep benchReport
			out := cmd.OutOrStdout()
			if which != "step" {
				ns, err := parseInts(sizes)
				if err != nil {
					return err
				}
				var skipped []string
				rep.GEMM, skipped = bench.GEMM(ns, minTime)
				for _, s := range skipped {
					fmt.Fprintln(cmd.ErrOrStderr(), "weft: bench:", s)
				}
			}
			if which != "gemm" {
				for _, m := range strings.Split(mods, ",") {
					for _, p := range strings.Split(precs, ",") {
						r, err := bench.Step(m, p, steps)
						if err != nil {
							return err
						}
						rep.Step = append(rep.Step, r)
					}
				}
			}
			if asJSON {
				return json.NewEncoder(out).Encode(rep)
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
			if len(rep.GEMM) > 0 {
				fmt.Fprintln(tw, "impl\tn\tGFLOP/s\t")
				for _, g := range rep.GEMM {
					fmt.Fprintf(tw, "%s\t%d\t%.1f\t\n", g.Impl, g.N, g.GFLOPS)
				}
			}
			if len(rep.Step) > 0 {
				fmt.Fprintln(tw, "model\tprecision\tms/step\tallocs/step\t")
				for _, s := range rep.Step {
					fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.0f\t\n", s.Model, s.Precision, s.MS, s.Allocs)
				}
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	cmd.Flags().StringVar(&sizes, "sizes", "256,512,1024,2048", "GEMM sizes n (n×n×n)")
	cmd.Flags().DurationVar(&minTime, "min-time", 500*time.Millisecond, "time per GEMM measurement")
	cmd.Flags().StringVar(&mods, "models", "mlp784,mlp,cnn,gpt", "models for step")
	cmd.Flags().StringVar(&precs, "precisions", "32-true,bf16-mixed", "precisions for step")
	cmd.Flags().IntVar(&steps, "steps", 20, "timed steps per model and precision")
	return cmd
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("size %q: want positive integers separated by commas", f)
		}
		out = append(out, n)
	}
	return out, nil
}

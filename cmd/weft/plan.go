package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/strategy"
)

func planCmd() *cobra.Command {
	var (
		prec    precisionFlags
		model   string
		strat   string
		devices int
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show the resolved precision and memory of a run without running it",
		Long: `plan resolves the precision of every module of a model (its plugin stack,
parameter storage dtype, compute dtype per op class, communication dtype)
and the bytes each rank holds for parameters, gradients and AdamW state
under a strategy.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pol, scaling, err := prec.policy(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			m, err := models.New(model, 0)
			if err != nil {
				return err
			}
			p, err := fabric.MakePlan(m, pol, scaling, strat, devices)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(p)
			}
			printPlanTo(cmd.OutOrStdout(), model, p)
			return nil
		},
	}
	prec.register(cmd.Flags(), "32-true")
	cmd.Flags().StringVar(&model, "model", "gpt", fmt.Sprintf("model %v", models.Names()))
	cmd.Flags().StringVar(&strat, "strategy", "single", "strategy: "+strings.Join(strategy.Names(), ", "))
	cmd.Flags().IntVar(&devices, "devices", 1, "ranks")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

func printPlanTo(out io.Writer, model string, p *fabric.Plan) {
	fmt.Fprintf(out, "%s: precision %s", model, p.Precision)
	for _, r := range p.Rules {
		fmt.Fprintf(out, ", %s", r)
	}
	fmt.Fprintf(out, "; strategy %s on %d device(s); loss scaling %s\n", p.Strategy, p.Devices, p.LossScaling)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "module\tkind\tplugins\tstorage\tgemm\tnorm\telementwise\tcomm\tparams\tparam B\tgrad B\toptim B")
	for _, m := range p.Modules {
		path := m.Path
		if path == "" {
			path = "(root)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", path, m.Kind, strings.Join(m.Plugins, "+"),
			m.Storage, m.Compute["gemm"], m.Compute["norm"], m.Compute["elementwise"], m.Communication,
			m.Params, m.BytesPerRank.Params, m.BytesPerRank.Grads, m.BytesPerRank.OptimizerState)
	}
	b := p.BytesPerRank
	fmt.Fprintf(tw, "total per rank\t\t\t\t\t\t\t\t\t%d\t%d\t%d\n", b.Params, b.Grads, b.OptimizerState)
	tw.Flush()
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/weftml/weft/data"
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
		tp      int
		seq     bool
		batch   int
		asJSON  bool
		ckpt    []string
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show the resolved precision and memory of a run without running it",
		Long: `plan converts a model built on shapes alone (no memory for weights) exactly
as training does and shows every module's plugin stack, which plugin replaced
its arithmetic, the storage of its tensors (packed 4-bit codes and their
constants, int8 codes, FP8 gathers under FSDP), its compute dtype per op
class and communication dtypes, and the bytes each rank holds for trainable
parameters, frozen weights, gradients and AdamW state under a strategy, and
(gpt, cnn) its predicted allocator peak per rank over a training step on a
global batch of --batch rows, with what is live at it. It refuses what
training refuses, with the same message, and prints the warnings training
prints. With --tp T the model is split as a rank of a mesh row holds it
(strategy and bytes are per rank of the --devices/T data-parallel ranks),
and the split Linears' layouts and the group's all-reduces follow;
--sequence-parallel adds the modules that run on shares of the sequence
and counts the reduce-scatters and all-gathers that replace the
all-reduces.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pol, scaling, err := prec.policy(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			m, err := models.NewMeta(model, 0)
			if err != nil {
				return err
			}
			layout, err := planSplit(m, model, tp, devices, seq)
			if err != nil {
				return err
			}
			p, err := fabric.MakePlan(m, pol, scaling, strat, devices/max(tp, 1))
			if err != nil {
				return err
			}
			if layout != nil {
				p.SplitTensors(layout)
			}
			p.ActivationCheckpointing = ckpt
			if b, ok := sampleBatch(m, batch); ok {
				if err := p.PredictPeak(b); err != nil {
					return err
				}
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(p)
			}
			printPlanTo(cmd.OutOrStdout(), model, p)
			if layout != nil {
				printSplit(cmd.OutOrStdout(), layout, m, batch/(devices/tp))
			}
			return nil
		},
	}
	prec.register(cmd.Flags(), "32-true")
	cmd.Flags().StringVar(&model, "model", "gpt", fmt.Sprintf("model %v", models.Names()))
	cmd.Flags().StringVar(&strat, "strategy", "single", "strategy: "+strings.Join(strategy.Names(), ", "))
	cmd.Flags().IntVar(&devices, "devices", 1, "ranks")
	cmd.Flags().IntVar(&tp, "tp", 1, "tensor-parallel ranks per mesh row: the plan is a rank's, with the split Linears' layouts")
	cmd.Flags().BoolVar(&seq, "sequence-parallel", false, "with --tp: the plan of a sequence-parallel run (norms and residual stream on shares of the sequence)")
	cmd.Flags().IntVar(&batch, "batch", 8, "global batch rows of the step whose peak is predicted")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	cmd.Flags().StringSliceVar(&ckpt, "activation-checkpointing", nil, "predict the peak with these modules' forward recomputed in backward, e.g. 'blocks.*'")
	return cmd
}

func printPlanTo(out io.Writer, model string, p *fabric.Plan) {
	fmt.Fprintf(out, "%s: precision %s", model, p.Precision)
	for _, r := range p.Rules {
		fmt.Fprintf(out, ", %s", r)
	}
	fmt.Fprintf(out, "; strategy %s on %d device(s); loss scaling %s\n", p.Strategy, p.Devices, p.LossScaling)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "module\tkind\tplugins\tconverted\tstorage\tgemm\tnorm\telementwise\tcomm\tparams\tfrozen\tparam B\tfrozen B\tgrad B\toptim B")
	for _, m := range p.Modules {
		path, converted := m.Path, m.Converted
		if path == "" {
			path = "(root)"
		}
		if converted == "" {
			converted = "-"
		}
		b := m.BytesPerRank
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", path, m.Kind, strings.Join(m.Plugins, "+"), converted,
			m.Storage, m.Compute["gemm"], m.Compute["norm"], m.Compute["elementwise"], m.Communication,
			m.Params, m.Frozen, b.Params, b.Frozen, b.Grads, b.OptimizerState)
	}
	b := p.BytesPerRank
	fmt.Fprintf(tw, "total per rank\t\t\t\t\t\t\t\t\t\t\t%d\t%d\t%d\t%d\n", b.Params, b.Frozen, b.Grads, b.OptimizerState)
	tw.Flush()
	if k := p.Peak; k != nil {
		mib := func(b int64) float64 { return float64(b) / (1 << 20) }
		fmt.Fprintf(out, "plan: the allocator peaks at %.1f MiB a rank, at %s (state %.1f, grads %.1f, gathered %.1f, activations %.1f of %.1f saved, transient %.1f, scratch %.1f)\n",
			mib(k.Bytes), k.At, mib(k.State), mib(k.Grads), mib(k.Gathered), mib(k.Activations), mib(k.Saved), mib(k.Transient), mib(k.Scratch))
	}
	for _, w := range p.Warnings {
		fmt.Fprintln(out, "warning:", w)
	}
}

// sampleBatch is a global batch of rows for a reference model the plan's
// peak is predicted over (only its shapes are read); false for a model
// without one.
func sampleBatch(m models.Model, rows int) (data.Batch, bool) {
	switch m.(type) {
	case *models.GPT:
		t := models.ReferenceGPT.Context
		return data.Batch{Tokens: make([]int, rows*t), Shape: []int{rows, t}, Targets: make([]int, rows*t)}, true
	case *models.CNN:
		return data.GlyphBatch(data.GlyphConfig{}, rows, 0), true
	}
	return data.Batch{}, false
}

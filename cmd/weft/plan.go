package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/train"
)

func planCmd() *cobra.Command {
	var (
		f            runFlags
		asJSON       bool
		ranksPerHost int
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show the resolved precision and memory of a run without running it",
		Long: `plan describes the run that weft train with the same flags (and --config)
trains, without training: it builds the model on shapes alone (no memory
for weights or batch) and converts it exactly as training does, and shows
every module's plugin stack, which plugin replaced its arithmetic, the
storage of its tensors (packed 4-bit codes and their constants, int8
codes, FP8 gathers under FSDP), its compute dtype per op class and
communication dtypes, and the bytes each rank holds for trainable
parameters, frozen weights, gradients and AdamW state under the strategy
and mesh; with --lora, the adapters that alone train. It predicts each
rank's allocator peak over a training step of --batch-size rows (split
over --grad-accum micro-batches) and an evaluation of as many, with what
is live at it, which weft train compares with the memory it can have
before it allocates; with several in-process ranks (--comm local, which
auto is outside mpirun), also the peak of the process that runs them
all, which weft train's closing memory line measures (under mpirun a
process runs one rank). It refuses what training refuses, with the same
message, and prints the warnings training prints. With --tp T the model
is split as a rank of a mesh row holds it (strategy and bytes are per
rank of the --devices/T data-parallel ranks), and the split Linears'
layouts and the group's all-reduces follow; --sequence-parallel adds the
modules that run on shares of the sequence and counts the
reduce-scatters and all-gathers that replace the all-reduces. It splits
what each rank sends a step between the ranks on its host and those on
others, with the ranks mpirun places on each host: its count under
mpirun, else --ranks-per-host, else hsdp's --shard-size, else all.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.resolve(cmd.Flags(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			warn := func(msg string) { fmt.Fprintln(cmd.ErrOrStderr(), "weft: warning:", msg) }
			p, err := train.Plan(cmd.Context(), c, warn)
			if err != nil {
				return err
			}
			if ranksPerHost != 0 {
				if ranksPerHost < 0 || c.Devices%ranksPerHost != 0 || ranksPerHost%max(c.TP, 1) != 0 {
					return fmt.Errorf("--ranks-per-host %d: give a count of whole mesh rows (of --tp %d) that divides the %d ranks", ranksPerHost, max(c.TP, 1), c.Devices)
				}
				p.PredictTraffic(ranksPerHost, !c.ReshardAfterForward)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(p)
			}
			printPlanTo(cmd.OutOrStdout(), c.Model, p)
			if l := p.Layout(); l != nil {
				printSplit(cmd.OutOrStdout(), l, c)
			}
			return nil
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	cmd.Flags().IntVar(&ranksPerHost, "ranks-per-host", 0, "ranks on each host, to split the traffic between hosts (default: mpirun's count, else all)")
	return cmd
}

func printPlanTo(out io.Writer, model string, p *fabric.Plan) {
	fmt.Fprintf(out, "%s: precision %s", model, p.Precision)
	for _, r := range p.Rules {
		fmt.Fprintf(out, ", %s", r)
	}
	fmt.Fprintf(out, "; strategy %s on %s; loss scaling %s\n", p.Strategy, meshOf(p), p.LossScaling)
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
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	for _, a := range p.Adapters {
		fmt.Fprintf(out, "adapter %s %v: %d B (trains; the rest is frozen)\n", a.Path, a.Shape, a.Bytes)
	}
	if k := p.Peak; k != nil {
		process := ""
		if k.RanksInProcess > 1 {
			process = fmt.Sprintf(" (%.1f MiB a process of %d in-process ranks, up to %.1f where their transients coincide; under mpirun a process is a rank)", mib(k.Process), k.RanksInProcess, mib(k.ProcessMost))
		}
		fmt.Fprintf(out, "plan: the allocator peaks at %.1f MiB a rank%s, at %s (state %.1f, grads %.1f, gathered %.1f, activations %.1f (the forward saves %.1f), transient %.1f, scratch %.1f)\n",
			mib(k.Bytes), process, k.At, mib(k.State), mib(k.Grads), mib(k.Gathered), mib(k.Activations), mib(k.Saved), mib(k.Transient), mib(k.Scratch))
	}
	if t := p.Traffic; t != nil && p.Devices > 1 {
		fmt.Fprintf(out, "plan: each rank sends %.2f MiB a step to ranks on its host and %.2f MiB to other hosts (%d ranks a host%s)\n",
			mib(t.InsideHost), mib(t.BetweenHosts), t.RanksPerHost, shardGroups(p))
	}
	if t := p.Traffic; t != nil && p.Devices > 1 && len(t.Gathers)+len(t.Reductions) > 0 {
		fmt.Fprintf(out, "plan: %s", p.Strategy)
		for i, d := range [][]fabric.DTypeTraffic{t.Gathers, t.Reductions} {
			if len(d) == 0 {
				continue
			}
			if i == 1 && len(t.Gathers) > 0 {
				fmt.Fprint(out, ";")
			}
			fmt.Fprintf(out, " %s %s: %.2f MiB a step", []string{"gathers", "reduces"}[i], dtypeShares(d), mib(sumBytes(d)))
		}
		fmt.Fprintln(out)
	}
	for _, w := range p.Warnings {
		fmt.Fprintln(out, "warning:", w)
	}
}

// dtypeShares names the dtypes of d, with the parameter elements each
// carries where there are several: "bfloat16 (393216 params) and float32 (41216)".
func dtypeShares(d []fabric.DTypeTraffic) string {
	if len(d) == 1 {
		return d[0].DType
	}
	parts := make([]string, len(d))
	for i, x := range d {
		parts[i] = fmt.Sprintf("%s (%d)", x.DType, x.Params)
		if i == 0 {
			parts[i] = fmt.Sprintf("%s (%d params)", x.DType, x.Params)
		}
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// sumBytes is the bytes d sends in all.
func sumBytes(d []fabric.DTypeTraffic) int64 {
	var b int64
	for _, x := range d {
		b += x.Bytes
	}
	return b
}

// shardGroups says how hsdp groups the ranks, "" for other strategies.
func shardGroups(p *fabric.Plan) string {
	if p.ShardSize == 0 {
		return ""
	}
	return fmt.Sprintf("; hsdp shards within groups of %d, all-reduces across %d", p.ShardSize, p.Devices/p.ShardSize)
}

// meshOf says which ranks the plan's run has: its data-parallel ranks
// and, with tensor parallelism, the mesh they are rows of.
func meshOf(p *fabric.Plan) string {
	if p.TensorParallel <= 1 {
		return fmt.Sprintf("%d device(s)", p.Devices)
	}
	return fmt.Sprintf("%d device(s): a mesh of %d data-parallel rank(s) × %d tensor-parallel", p.Devices*p.TensorParallel, p.Devices, p.TensorParallel)
}

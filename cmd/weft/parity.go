package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/weftml/weft/cmd/weft/internal/parity"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/strategy"
)

func parityCmd() *cobra.Command {
	var (
		refs, model, spec, dt string
		strat, backend        string
		devices, tp, shard    int
		sequence              bool
		gptSize               string
		asJSON                bool
	)
	cmd := &cobra.Command{
		Use:   "parity",
		Short: "Replay a PyTorch reference run and compare every step",
		Long: `parity loads a model's initial weights and data from DIR/refs.safetensors,
trains the reference schedule with a precision and prints each step's loss.
Without --json it compares against DIR/trajectories.json and fails on a
mismatch, saying where. --dtype float64|float32 replays the pure-float runs
(float64-manual, 32-true) with the loss in that dtype too.

--tp T splits the gpt's attention heads and MLP over mesh rows of T ranks
(Megatron's tensor parallelism); --strategy then runs over the --devices/T
ranks of each column; --sequence-parallel adds Megatron's sequence
parallelism (the norms and residual stream on each rank's share of the
sequence). --gpt layers,width,heads,context trains a gpt of that
size from weft's seeded initialisation on generated tokens, with no
reference file, and compares it with the same run on one device.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("dtype") {
				spec = dt
			}
			c, err := parity.CaseFor(spec)
			if err != nil {
				return err
			}
			dist := parity.Dist{Strategy: strat, Devices: devices, Backend: backend, TP: tp, Sequence: sequence, ShardSize: shard}
			if cmd.Flags().Changed("gpt") {
				return paritySized(cmd.OutOrStdout(), gptSize, c, dist, asJSON)
			}
			dir := refs
			if !cmd.Flags().Changed("refs") {
				dir = models.ReferenceDir(refs)
			}
			return parityReference(cmd.OutOrStdout(), dir, model, c, dist, asJSON)
		},
	}
	cmd.Flags().StringVar(&refs, "refs", models.DefaultReferenceDir, "reference folder (WEFT_REFERENCE_DIR overrides the default)")
	cmd.Flags().StringVar(&model, "model", "mlp", fmt.Sprintf("reference model %v", models.Names()))
	cmd.Flags().StringVar(&spec, "precision", "32-true", "precision spec (64-true, 32-true, 16-mixed, bf16-mixed, 16-true, bf16-true ...)")
	cmd.Flags().StringVar(&dt, "dtype", "", "float64 or float32: the pure-float runs (alias for --precision float64-manual / float32)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of comparing")
	cmd.Flags().StringVar(&strat, "strategy", "single", "strategy: "+strings.Join(strategy.Names(), ", ")+" (the global batch is split evenly over the ranks)")
	cmd.Flags().IntVar(&devices, "devices", 1, "ranks")
	cmd.Flags().IntVar(&tp, "tp", 1, "tensor-parallel ranks per mesh row (divides --devices; the gpt's heads split over them)")
	cmd.Flags().IntVar(&shard, "shard-size", 0, "with --strategy hsdp: data-parallel ranks that split the state (divides them)")
	cmd.Flags().BoolVar(&sequence, "sequence-parallel", false, "with --tp: keep the activations between split Linears as each rank's share of the sequence")
	cmd.Flags().StringVar(&gptSize, "gpt", "", "a gpt of layers,width,heads,context (e.g. 2,32,8,8) from seeded weights instead of a reference model")
	cmd.Flags().StringVar(&backend, "comm", "local", "collectives: local (ranks as goroutines) or mpi (one process per rank, under mpirun; --devices 0 takes mpirun's size)")
	return cmd
}

// parityReference replays model's PyTorch reference run from dir with
// c's precision on d, and compares its losses with the run's trajectory
// (or with the baseline runs when c has no tolerance against it).
func parityReference(out io.Writer, dir, model string, c parity.Case, d parity.Dist, asJSON bool) error {
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
	res, err := parity.TrainOn(ref, model, steps, c.Spec, d, nil)
	if err == nil && len(res.Ranks) > 0 && res.Ranks[0].Rank != 0 {
		return nil // under mpirun, rank 0 reports
	}
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(out).Encode(res)
	}
	printLosses(out, res)
	if res.NonFinite != "" {
		fmt.Fprintln(out, res.NonFinite)
	}
	run, ok := traj.Models[model].Runs[c.Run]
	if !ok || c.Tol == (parity.Tolerance{}) {
		return compareBaseline(out, res, traj.Models[model].Runs)
	}
	if err := parity.Compare(res, run, c.Tol); err != nil {
		return fmt.Errorf("%s %s differs from PyTorch's %s run: %w", model, res.Precision, c.Run, err)
	}
	fmt.Fprintf(out, "%s %s matches PyTorch's %s run: %d steps (step 0 within %.0g, all within %.0g relative)\n",
		model, res.Precision, c.Run, len(res.Losses), c.Tol.First, c.Tol.Rest)
	return nil
}

// printLosses prints each step's loss.
func printLosses(out io.Writer, res *parity.Result) {
	for s, l := range res.Losses {
		fmt.Fprintf(out, "step %3d  loss %.9f\n", s, float64(l))
	}
}

// sizedSteps is how many steps a --gpt replay trains.
const sizedSteps = 8

// paritySized trains the gpt of size on d and compares its losses with
// the same run on one device, to 1e-9 relative for 64-true and float64,
// else within the tolerance the precision has against PyTorch after step
// 0 (a row-parallel Linear rounds its partial sums before reducing them).
func paritySized(out io.Writer, size string, c parity.Case, d parity.Dist, asJSON bool) error {
	cfg, err := parseGPTSize(size)
	if err != nil {
		return err
	}
	cfg.Vocab = models.ReferenceGPT.Vocab
	res, err := parity.TrainGPT(cfg, sizedSteps, c.Spec, d, nil)
	if err != nil || len(res.Ranks) > 0 && res.Ranks[0].Rank != 0 {
		return err // under mpirun, rank 0 reports
	}
	if asJSON {
		return json.NewEncoder(out).Encode(res)
	}
	printLosses(out, res)
	one, err := parity.TrainGPT(cfg, sizedSteps, c.Spec, parity.Dist{Strategy: "single", Devices: 1, Backend: "local"}, nil)
	if err != nil {
		return err
	}
	tol := c.Tol.Rest
	if c.Run == "64-true" || c.Run == "float64-manual" {
		tol = 1e-9 // the same arithmetic in float64, summed in another order
	}
	if tol == 0 {
		fmt.Fprintf(out, "gpt %s %s: no tolerance is known for this precision; the one-device run's final loss is %.9f\n", size, res.Precision, float64(one.Losses[len(one.Losses)-1]))
		return nil
	}
	if err := parity.SameLosses(res.Losses, one.Losses, tol); err != nil {
		return fmt.Errorf("gpt %s %s on %d devices (%s) differs from one device: %w", size, res.Precision, d.Devices, meshName(d), err)
	}
	fmt.Fprintf(out, "gpt %s %s on %d devices (%s) matches one device: %d steps within %.0g relative\n",
		size, res.Precision, d.Devices, meshName(d), len(res.Losses), tol)
	return nil
}

// parseGPTSize reads --gpt's layers,width,heads,context.
func parseGPTSize(s string) (models.GPTConfig, error) {
	var cfg models.GPTConfig
	n, err := fmt.Sscanf(s, "%d,%d,%d,%d", &cfg.Layers, &cfg.Width, &cfg.Heads, &cfg.Context)
	switch {
	case err != nil || n != 4 || fmt.Sprintf("%d,%d,%d,%d", cfg.Layers, cfg.Width, cfg.Heads, cfg.Context) != s:
		return cfg, fmt.Errorf("--gpt %q: want layers,width,heads,context, four positive integers such as 2,32,8,8", s)
	case cfg.Layers < 1 || cfg.Heads < 1 || cfg.Width < 1 || cfg.Width%cfg.Heads != 0 || cfg.Context < 2:
		return cfg, fmt.Errorf("--gpt %q: want at least one layer, a width that the heads divide and a context of at least 2", s)
	}
	return cfg, nil
}

// baselineRuns are what a composition PyTorch cannot run is compared with,
// in order of preference.
var baselineRuns = []string{"bf16-mixed", "32-true"}

// compareBaseline prints how a run without a PyTorch counterpart ends
// relative to the first baseline run the reference has.
func compareBaseline(out io.Writer, res *parity.Result, runs map[string]parity.Run) error {
	last := float64(res.Losses[len(res.Losses)-1])
	for _, name := range baselineRuns {
		base, ok := runs[name]
		if !ok || len(base.Losses) != len(res.Losses) || base.Losses[len(base.Losses)-1] == nil {
			continue
		}
		ref := *base.Losses[len(base.Losses)-1]
		fmt.Fprintf(out, "%s %s: no PyTorch run of this composition; final loss %.6f is %+.2f%% of PyTorch's %s (%.6f)\n",
			res.Model, res.Precision, last, 100*(last-ref)/ref, name, ref)
		return nil
	}
	fmt.Fprintf(out, "%s %s: no PyTorch run to compare with; final loss %.6f\n", res.Model, res.Precision, last)
	return nil
}

// meshName says how d splits the model: "tp 2", "tp 2, sequence parallel".
func meshName(d parity.Dist) string {
	name := fmt.Sprintf("tp %d", max(d.TP, 1))
	if d.Sequence {
		name += ", sequence parallel"
	}
	return name
}

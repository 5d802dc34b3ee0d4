package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weftml/weft/cmd/weft/internal/bench"
)

// benchReport is `weft bench --json`'s object; a sub-benchmark fills only its part.
type benchReport struct {
	GEMM      []bench.GEMMResult      `json:"gemm,omitempty"`
	Step      []bench.StepResult      `json:"step,omitempty"`
	AllReduce []bench.AllReduceResult `json:"allreduce,omitempty"`
}

// benchFlags are weft bench's settings; each command binds those it reads.
type benchFlags struct {
	asJSON               bool
	backend              string
	sizes, models, precs string
	gptSize, profile     string
	steps, batch         int
	minTime              time.Duration
}

func benchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure GEMM speed (beside OpenBLAS), training-step time per precision, all-reduce bandwidth",
		Long: `weft bench runs bench gemm, then bench step; bench allreduce runs on its own.
Each prints a table, or with --json one JSON object.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rep benchReport
			if err := f.gemm(cmd, &rep); err != nil {
				return err
			}
			if err := f.step(cmd, &rep); err != nil {
				return err
			}
			return f.print(cmd, rep)
		},
	}
	cmd.PersistentFlags().BoolVar(&f.asJSON, "json", false, "print one JSON object")
	f.bindGEMM(cmd.Flags())
	f.bindStep(cmd.Flags())
	f.bindMinTime(cmd.Flags())
	cmd.AddCommand(benchGEMMCmd(&f), benchStepCmd(&f), benchAllReduceCmd(&f))
	return cmd
}

func benchGEMMCmd(f *benchFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gemm",
		Short: "Measure weft's GEMMs beside OpenBLAS, GFLOP/s per size",
		Args:  cobra.NoArgs,
		RunE:  f.reporting(f.gemm),
	}
	f.bindGEMM(cmd.Flags())
	f.bindMinTime(cmd.Flags())
	return cmd
}

func benchStepCmd(f *benchFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "step",
		Short: "Time training steps per model and precision",
		Long: `bench step times training steps of the --models at their reference sizes
with each of --precisions.

bench step --gpt layers,width,heads,context --batch B times a gpt of any size
(the Go corpus's 98-token vocabulary) with AdamW on B random sequences of the
full context, and reports per precision: the median ms per step; model GFLOP/s,
6·N·tokens per step with N all parameters (embeddings included; the attention
products QKᵀ and AV are not counted); that as a fraction of weft's f32 GEMM at
n=1024 measured in the same run; cores busy (process CPU time over wall time of
the timed steps); the allocator's peak (tensor.Memory().Peak) and the peak RSS
(VmHWM), both from just before the model is built.`,
		Args: cobra.NoArgs,
		RunE: f.reporting(f.step),
	}
	f.bindStep(cmd.Flags())
	f.bindMinTime(cmd.Flags())
	return cmd
}

func benchAllReduceCmd(f *benchFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "allreduce",
		Short: "Measure all-reduce bandwidth of the comm backends",
		Long: `bench allreduce measures float32 all-reduces of 4 KiB to 64 MiB on 2
in-process ranks and, when mpirun is installed, on 2 Open MPI processes (it
launches itself under mpirun), side by side; under mpirun (--comm mpi) it
measures those ranks, wherever they run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := allReduceBench(f.backend)
			if err != nil || f.backend == "mpi" {
				return printMPIRank(cmd, r, err)
			}
			return f.print(cmd, benchReport{AllReduce: r})
		},
	}
	cmd.Flags().StringVar(&f.backend, "comm", "", "measure only this backend (mpi: run under mpirun)")
	return cmd
}

// reporting is the RunE of a subcommand whose measure fills a report
// that it prints.
func (f *benchFlags) reporting(measure func(*cobra.Command, *benchReport) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		var rep benchReport
		if err := measure(cmd, &rep); err != nil {
			return err
		}
		return f.print(cmd, rep)
	}
}

// bindGEMM binds the GEMM measurement's flags.
func (f *benchFlags) bindGEMM(fs *pflag.FlagSet) {
	fs.StringVar(&f.sizes, "sizes", "256,512,1024,2048", "GEMM sizes n (n×n×n)")
}

// bindMinTime binds --min-time: the GEMMs' (and bench step --gpt's f32
// GEMM its GFLOP/s is compared with).
func (f *benchFlags) bindMinTime(fs *pflag.FlagSet) {
	fs.DurationVar(&f.minTime, "min-time", 500*time.Millisecond, "time per GEMM measurement")
}

// bindStep binds the step timing's flags.
func (f *benchFlags) bindStep(fs *pflag.FlagSet) {
	fs.StringVar(&f.models, "models", "mlp784,mlp,cnn,gpt", "models for step")
	fs.StringVar(&f.precs, "precisions", "32-true,bf16-mixed", "precisions for step")
	fs.IntVar(&f.steps, "steps", 20, "timed steps per model and precision")
	fs.StringVar(&f.gptSize, "gpt", "", "step: time a gpt of this size instead of --models: layers,width,heads,context (e.g. 6,384,6,256)")
	fs.IntVar(&f.batch, "batch", 8, "step with --gpt: sequences per step")
	fs.StringVar(&f.profile, "cpuprofile", "", "step: write a CPU profile of the steps (go tool pprof) to this file")
}

// gemm measures the GEMMs into rep.
func (f *benchFlags) gemm(cmd *cobra.Command, rep *benchReport) error {
	ns, err := parseInts(f.sizes)
	if err != nil {
		return err
	}
	var skipped []string
	rep.GEMM, skipped = bench.GEMM(ns, bench.GEMMImpls, f.minTime)
	for _, s := range skipped {
		fmt.Fprintln(cmd.ErrOrStderr(), "weft: bench:", s)
	}
	return nil
}

// step times the training steps into rep; with --gpt it adds weft's f32
// GEMM at n=1024 to rep unless measured already, and each step's fraction
// of it.
func (f *benchFlags) step(cmd *cobra.Command, rep *benchReport) error {
	cfg := bench.StepConfig{Steps: f.steps}
	names := strings.Split(f.models, ",")
	if f.gptSize != "" {
		if cmd.Flags().Changed("models") {
			return fmt.Errorf("--gpt %s sizes the gpt; leave out --models", f.gptSize)
		}
		var err error
		if cfg.GPT, err = parseGPTSize(f.gptSize); err != nil {
			return err
		}
		cfg.Batch, names = f.batch, []string{"gpt"}
	} else if cmd.Flags().Changed("batch") {
		return fmt.Errorf("--batch %d: a batch size goes with --gpt; the other models run at their reference batch", f.batch)
	}
	if f.profile != "" {
		stop, err := startCPUProfile(f.profile)
		if err != nil {
			return err
		}
		defer stop()
	}
	for _, m := range names {
		for _, p := range strings.Split(f.precs, ",") {
			cfg.Model, cfg.Precision = m, p
			r, err := bench.Step(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			rep.Step = append(rep.Step, r)
		}
	}
	if f.gptSize == "" {
		return nil
	}
	i := slices.IndexFunc(rep.GEMM, func(g bench.GEMMResult) bool { return g.Impl == "weft-f32" && g.N == 1024 })
	if i < 0 {
		peak, _ := bench.GEMM([]int{1024}, []string{"weft-f32"}, f.minTime)
		rep.GEMM, i = append(rep.GEMM, peak...), len(rep.GEMM)
	}
	for j := range rep.Step {
		rep.Step[j].OfGEMMPeak = rep.Step[j].GFLOPS / rep.GEMM[i].GFLOPS
	}
	return nil
}

// print writes rep as JSON with --json, else as tables.
func (f *benchFlags) print(cmd *cobra.Command, rep benchReport) error {
	out := cmd.OutOrStdout()
	if f.asJSON {
		return json.NewEncoder(out).Encode(rep)
	}
	for _, a := range rep.AllReduce {
		fmt.Fprintf(out, "allreduce %-5s %d ranks %8d KiB float32: %9.1f µs, %.2f GB/s per rank\n", a.Backend, a.Ranks, a.Bytes>>10, a.Micros, a.GBPerS)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(rep.GEMM) > 0 {
		fmt.Fprintln(tw, "impl\tn\tGFLOP/s\t")
		for _, g := range rep.GEMM {
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t\n", g.Impl, g.N, g.GFLOPS)
		}
	}
	if len(rep.Step) > 0 {
		fmt.Fprintln(tw, "model\tprecision\tbatch\tparams\tms/step\tGFLOP/s\tof GEMM\tcores busy\tpeak alloc MiB\tpeak RSS MiB\tallocs/step\t")
		for _, s := range rep.Step {
			flops, ofPeak := "-", "-"
			if s.GFLOPS > 0 {
				flops = fmt.Sprintf("%.1f", s.GFLOPS)
			}
			if s.OfGEMMPeak > 0 {
				ofPeak = fmt.Sprintf("%.0f%%", 100*s.OfGEMMPeak)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.2fM\t%.2f\t%s\t%s\t%.2f\t%.0f\t%.0f\t%.0f\t\n", s.Model, s.Precision, s.Batch, float64(s.Params)/1e6,
				s.MS, flops, ofPeak, s.CoresBusy, float64(s.PeakAlloc)/(1<<20), float64(s.PeakRSS)/(1<<20), s.Allocs)
		}
	}
	return tw.Flush()
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

// startCPUProfile starts writing a CPU profile to path; stop ends it.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// allReduceBench measures the local backend and, when mpirun exists, the
// mpi backend by running this binary under mpirun -np 2; with backend set
// it measures only that one (the mpi side of the pair).
func allReduceBench(backend string) ([]bench.AllReduceResult, error) {
	if backend != "" {
		return bench.AllReduce(backend, 0, bench.AllReduceSizes)
	}
	out, err := bench.AllReduce("local", 2, bench.AllReduceSizes)
	if err != nil {
		return nil, err
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		return out, nil
	}
	self, err := os.Executable()
	if err != nil {
		return out, nil
	}
	b, err := exec.Command(mpirun, append(mpirunArgs(2), self, "bench", "allreduce", "--comm", "mpi", "--json")...).Output()
	if err != nil {
		return nil, fmt.Errorf("bench allreduce under mpirun: %w", err)
	}
	var rep benchReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("bench allreduce under mpirun: %w", err)
	}
	return append(out, rep.AllReduce...), nil
}

// printMPIRank prints one mpi rank's measurement: rank 0 as JSON, the others nothing.
func printMPIRank(cmd *cobra.Command, r []bench.AllReduceResult, err error) error {
	if err != nil {
		return err
	}
	if os.Getenv("OMPI_COMM_WORLD_RANK") != "0" {
		return nil
	}
	return json.NewEncoder(cmd.OutOrStdout()).Encode(benchReport{AllReduce: r})
}

// mpirunArgs are mpirun's options for n processes on this machine (as root too).
func mpirunArgs(n int) []string {
	args := []string{"--oversubscribe", "-np", strconv.Itoa(n)}
	if os.Geteuid() == 0 {
		args = append(args, "--allow-run-as-root")
	}
	return args
}

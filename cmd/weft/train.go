package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/train"
)

func trainCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train a model on bundled real data or your own text",
		Long: `train trains a model on data that needs no download: gpt on the Go standard
library's source, cnn on rendered digits, hybrid reading rendered digit strings.
--data trains gpt on your own text instead, byte-level or with GPT-2's BPE.
It prints the resolved precision plan (weft plan with the same flags prints
it without training), shows progress, writes DIR/metrics.jsonl, DIR/loss.png
and checkpoints under DIR/checkpoints, from which --resume continues
exactly (--keep-last of them, the newest; --resume-from STEP takes an older
one). A run folder holds one run: while one trains in it another is refused,
and a fresh run into it needs --overwrite. A YAML --config sets any field;
flags given explicitly override it.

Before allocating, it refuses a run whose predicted peak does not fit in
the memory its ranks can have (the cgroup's limit, else what the system
says is available, shared by the ranks on this machine), and says what
would fit; --memory-check off runs it anyway.

SIGINT or SIGTERM stops the run after the step in progress, with a checkpoint,
and weft exits 130 or 143; a second signal exits at once, without one. Under
mpirun, which forwards SIGTERM and kills the ranks a second later
(--mca odls_base_sigkill_timeout gives them longer), every rank stops at the
same step.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.resolve(cmd.Flags(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ctx, release := notifyStop(cmd.Context(), cmd.ErrOrStderr())
			defer release()
			out := detach(cmd.OutOrStdout())
			obs := newProgress(out, cmd.ErrOrStderr(), c)
			// A launcher hands each rank a terminal of its own, whatever
			// mpirun's output goes to: ranks print lines, not bars.
			file, ok := cmd.OutOrStdout().(*os.File)
			_, launched := comm.LauncherSize()
			obs.tty = ok && term.IsTerminal(int(file.Fd())) && !launched
			_, err = train.Run(ctx, c, f.resume || c.ResumeFrom != "", obs)
			obs.finish()
			out.close(ctx)
			return err
		},
	}
	f.register(cmd.Flags())
	return cmd
}

// progress is rank 0's report of a run: the plan, then a bar with loss,
// throughput and ETA on a terminal or a log line every few steps
// otherwise, then the summary.
type progress struct {
	out, warn io.Writer
	c         train.Config
	bar       *progressbar.ProgressBar
	start     time.Time
	first     int
	tty       bool // out is a terminal: show a bar
}

func newProgress(out, warn io.Writer, c train.Config) *progress {
	return &progress{out: out, warn: warn, c: c}
}

func (p *progress) Warn(msg string) { fmt.Fprintln(p.warn, "weft: warning:", msg) }

// Note prints what the run read and did to its folder (resumed from, overwrote).
func (p *progress) Note(msg string) { fmt.Fprintln(p.out, msg) }

func (p *progress) Plan(plan *fabric.Plan, start int) {
	printPlanTo(p.out, p.c.Model, plan)
	p.start, p.first = time.Now(), start
}

// memoryLine is the summary's memory report: each process's allocator
// peak, the plan's prediction of it and the resident peak, in MiB.
func memoryLine(procs []train.ProcessMemory) string {
	alloc, predicted, rss := make([]string, len(procs)), make([]string, len(procs)), make([]string, len(procs))
	for i, m := range procs {
		alloc[i] = fmt.Sprintf("%.1f", float64(m.PeakAlloc)/(1<<20))
		predicted[i] = fmt.Sprintf("%.1f", float64(m.PredictedAlloc)/(1<<20))
		if m.PredictedMost > m.PredictedAlloc {
			predicted[i] += fmt.Sprintf("-%.1f", float64(m.PredictedMost)/(1<<20))
		}
		rss[i] = fmt.Sprintf("%.1f", float64(m.PeakRSS)/(1<<20))
	}
	who := "peak"
	if len(procs) > 1 {
		who = "peak per rank"
	}
	return fmt.Sprintf("%s: alloc %s MiB, predicted %s MiB, RSS %s MiB", who, strings.Join(alloc, "/"), strings.Join(predicted, "/"), strings.Join(rss, "/"))
}

func (p *progress) Done(sum *train.Summary) {
	p.finish()
	if sum.Stopped != nil {
		fmt.Fprintf(p.out, "%v\n", sum.Stopped)
		return
	}
	fmt.Fprintf(p.out, "validation loss %.4f -> %.4f; checkpoint %s; metrics %s/metrics.jsonl; plot %s/loss.png\n",
		sum.FirstValLoss, sum.LastValLoss, sum.Checkpoint, p.c.Out, p.c.Out)
	fmt.Fprintln(p.out, memoryLine(sum.Memory))
	if sum.BF16Bytes > 0 {
		fmt.Fprintf(p.out, "quantized weights: %d bytes, %.1f%% of their %d bytes in bf16\n",
			sum.QuantizedBytes, 100*float64(sum.QuantizedBytes)/float64(sum.BF16Bytes), sum.BF16Bytes)
	}
}

func (p *progress) Step(m train.Metrics, total int) {
	val := ""
	if m.ValLoss != nil {
		val = fmt.Sprintf(" val %.4f", float64(*m.ValLoss))
	}
	line := fmt.Sprintf("loss %.4f%s scale %g %.0f/s", float64(m.Loss), val, m.LossScale, m.TokensPerS)
	if p.tty {
		if p.bar == nil {
			p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(p.out), progressbar.OptionShowCount(),
				progressbar.OptionSetPredictTime(true), progressbar.OptionSetWidth(30))
			p.bar.Set(p.first)
		}
		p.bar.Describe(line)
		p.bar.Set(m.Step + 1)
		return
	}
	if done := m.Step + 1 - p.first; m.ValLoss != nil || done%10 == 0 {
		eta := time.Duration(float64(time.Since(p.start)) / float64(done) * float64(total-m.Step-1)).Round(time.Second)
		fmt.Fprintf(p.out, "step %d/%d %s eta %s\n", m.Step+1, total, line, eta)
	}
}

func (p *progress) finish() {
	if p.bar != nil {
		p.bar.Finish()
		fmt.Fprintln(p.out)
		p.bar = nil
	}
}

package main

import (
	"fmt"
	"io"
	"maps"
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
	var (
		cfgPath string
		resume  bool
		rules   []string
	)
	c := train.Defaults()
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train a model on bundled real data or your own text",
		Long: `train trains a model on data that needs no download: gpt on the Go standard
library's source, cnn on rendered digits, hybrid reading rendered digit strings.
--data trains gpt on your own text instead, byte-level or with GPT-2's BPE.
It prints the resolved precision plan, shows progress, writes DIR/metrics.jsonl,
DIR/loss.png and checkpoints under DIR/checkpoints, from which --resume continues
exactly (--keep-last of them, the newest; --resume-from STEP takes an older one).
A run folder holds one run: while one trains in it another is refused, and a
fresh run into it needs --overwrite. A YAML --config sets any field; flags
given explicitly override it.

SIGINT or SIGTERM stops the run after the step in progress, with a checkpoint,
and weft exits 130 or 143; a second signal exits at once, without one. Under
mpirun, which forwards SIGTERM and kills the ranks a second later
(--mca odls_base_sigkill_timeout gives them longer), every rank stops at the
same step.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfgPath != "" {
				flagged := c
				c = train.Defaults()
				if err := train.LoadConfig(cfgPath, &c); err != nil {
					return err
				}
				overrideChanged(cmd, &c, flagged)
			}
			for _, r := range rules {
				m, err := parseModuleFor(r)
				if err != nil {
					return err
				}
				c.Modules = append(c.Modules, m)
			}
			resume = resume || c.ResumeFrom != ""
			ctx, release := notifyStop(cmd.Context(), cmd.ErrOrStderr())
			defer release()
			out := detach(cmd.OutOrStdout())
			obs := newProgress(out, cmd.ErrOrStderr(), c)
			// A launcher hands each rank a terminal of its own, whatever
			// mpirun's output goes to: ranks print lines, not bars.
			f, ok := cmd.OutOrStdout().(*os.File)
			_, launched := comm.LauncherSize()
			obs.tty = ok && term.IsTerminal(int(f.Fd())) && !launched
			_, err := train.Run(ctx, c, resume, obs)
			obs.finish()
			out.close(ctx)
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&cfgPath, "config", "", "YAML file with any of the run's settings")
	fs.BoolVar(&resume, "resume", false, "continue from the latest checkpoint in --out")
	fs.StringVar(&c.ResumeFrom, "resume-from", "", "continue from this checkpoint instead of the latest: a step of the run in --out (implies --resume), or a checkpoint folder")
	fs.BoolVar(&c.Overwrite, "overwrite", false, "start over in an --out that holds a run, removing its checkpoints and metrics")
	fs.IntVar(&c.KeepLast, "keep-last", c.KeepLast, "checkpoints kept in --out/checkpoints, the newest (older ones are removed as new ones are saved)")
	fs.StringVar(&c.Model, "model", c.Model, "model: gpt, llama, cnn or hybrid")
	fs.StringVar(&c.Precision, "precision", c.Precision, "precision spec, e.g. bf16-mixed, 16-mixed, bf16-true, bf16-mixed+fp8")
	fs.StringArrayVar(&rules, "precision-for", nil, "per-module precision 'GLOB=SPEC' (repeatable), e.g. 'vision.**=16-mixed'")
	fs.StringVar(&c.LossScale, "loss-scale", c.LossScale, "auto or none")
	fs.StringVar(&c.Strategy, "strategy", c.Strategy, "strategy: single, ddp, zero1, zero2 or fsdp")
	fs.IntVar(&c.Devices, "devices", c.Devices, "ranks (the batch is split evenly over them)")
	fs.IntVar(&c.TP, "tp", c.TP, "tensor-parallel ranks per mesh row (divides --devices): gpt's heads and MLP split over them, --strategy runs over the rest")
	fs.BoolVar(&c.SequenceParallel, "sequence-parallel", c.SequenceParallel, "with --tp: keep the activations between split Linears as each rank's share of the sequence (Megatron's sequence parallelism)")
	fs.StringVar(&c.Comm, "comm", c.Comm, "auto (mpi under mpirun, else local), local (ranks as goroutines) or mpi (one process per rank, under mpirun)")
	fs.DurationVar(&c.CommTimeout, "comm-timeout", c.CommTimeout, "how long a collective waits for a lost or hung peer before the run fails")
	fs.IntVar(&c.Steps, "steps", c.Steps, "optimizer steps")
	fs.IntVar(&c.BatchSize, "batch-size", c.BatchSize, "sequences or images per step")
	fs.Float64Var(&c.LR, "lr", c.LR, "AdamW learning rate")
	fs.IntVar(&c.EvalEvery, "eval-every", c.EvalEvery, "steps between validation passes")
	fs.IntVar(&c.SaveEvery, "save-every", c.SaveEvery, "steps between checkpoints")
	fs.StringVar(&c.Out, "out", c.Out, "run folder")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the data order and initial weights")
	fs.StringVar(&c.InitFrom, "init-from", c.InitFrom, "start from the weights of this run folder's latest checkpoint, of a safetensors file keyed by parameter path, or of an HF model folder (config.json + model.safetensors, GPT-2 or Llama) (fine-tuning)")
	fs.StringSliceVar(&c.LoRA.Targets, "lora", nil, "train only LoRA adapters on these module globs, e.g. 'blocks.*.qkv,blocks.*.fc'")
	fs.IntVar(&c.LoRA.Rank, "lora-rank", c.LoRA.Rank, "LoRA rank")
	fs.Float64Var(&c.LoRA.Alpha, "lora-alpha", c.LoRA.Alpha, "LoRA alpha")
	fs.StringVar(&c.CorpusPart, "corpus-part", c.CorpusPart, "train gpt on the Go sources under this path prefix of GOROOT/src, e.g. net/")
	fs.StringVar(&c.Data, "data", c.Data, "train gpt on your own text: a file, a folder of text files (recursively) or a quoted glob, instead of the Go corpus")
	fs.StringVar(&c.Tokenizer, "tokenizer", c.Tokenizer, "with --data: bytes (256 ids, the default) or gpt2 (GPT-2's BPE, from --tokenizer-dir)")
	fs.StringVar(&c.TokenizerDir, "tokenizer-dir", c.TokenizerDir, "folder of GPT-2's vocab.json and merges.txt (or encoder.json and vocab.bpe) for --tokenizer gpt2")
	fs.Float64Var(&c.ValFraction, "val-fraction", c.ValFraction, "with --data: the fraction of each file, from its end, held out for validation")
	fs.StringSliceVar(&c.ActivationCheckpointing, "activation-checkpointing", nil, "recompute these modules' forward in backward instead of keeping their activations, e.g. 'blocks.*'")
	fs.StringSliceVar(&c.ShardUnits, "shard-units", nil, "modules that are sharding units of their own, e.g. 'blocks.*,head' (default: every transformer block, each top-level child otherwise)")
	fs.BoolVar(&c.ReshardAfterForward, "reshard-after-forward", c.ReshardAfterForward, "fsdp: free a unit's gathered parameters after its forward and gather them again for its backward")
	fs.StringVar(&c.OnNaN, "on-nan", c.OnNaN, "a non-finite loss without a loss scaler: stop (with a diagnosis) or skip the batch")
	registerLoopFlags(fs, &c)
	return cmd
}

// overrideChanged copies into c the settings whose flags were given
// explicitly (flagged holds the flag values), so flags beat the config file.
func overrideChanged(cmd *cobra.Command, c *train.Config, flagged train.Config) {
	set := map[string]func(){
		"model": func() { c.Model = flagged.Model }, "precision": func() { c.Precision = flagged.Precision },
		"loss-scale": func() { c.LossScale = flagged.LossScale }, "strategy": func() { c.Strategy = flagged.Strategy },
		"devices": func() { c.Devices = flagged.Devices }, "steps": func() { c.Steps = flagged.Steps },
		"comm": func() { c.Comm = flagged.Comm }, "comm-timeout": func() { c.CommTimeout = flagged.CommTimeout },
		"batch-size": func() { c.BatchSize = flagged.BatchSize }, "lr": func() { c.LR = flagged.LR },
		"eval-every": func() { c.EvalEvery = flagged.EvalEvery }, "save-every": func() { c.SaveEvery = flagged.SaveEvery },
		"out": func() { c.Out = flagged.Out }, "seed": func() { c.Seed = flagged.Seed },
		"on-nan": func() { c.OnNaN = flagged.OnNaN }, "init-from": func() { c.InitFrom = flagged.InitFrom },
		"lora": func() { c.LoRA.Targets = flagged.LoRA.Targets }, "lora-rank": func() { c.LoRA.Rank = flagged.LoRA.Rank },
		"lora-alpha": func() { c.LoRA.Alpha = flagged.LoRA.Alpha }, "corpus-part": func() { c.CorpusPart = flagged.CorpusPart },
		"activation-checkpointing": func() { c.ActivationCheckpointing = flagged.ActivationCheckpointing },
		"shard-units":              func() { c.ShardUnits = flagged.ShardUnits },
		"reshard-after-forward":    func() { c.ReshardAfterForward = flagged.ReshardAfterForward },
		"data":                     func() { c.Data = flagged.Data },
		"tokenizer":                func() { c.Tokenizer = flagged.Tokenizer },
		"tokenizer-dir":            func() { c.TokenizerDir = flagged.TokenizerDir },
		"val-fraction":             func() { c.ValFraction = flagged.ValFraction },
		"tp":                       func() { c.TP = flagged.TP },
		"sequence-parallel":        func() { c.SequenceParallel = flagged.SequenceParallel },
		"resume-from":              func() { c.ResumeFrom = flagged.ResumeFrom },
		"overwrite":                func() { c.Overwrite = flagged.Overwrite },
		"keep-last":                func() { c.KeepLast = flagged.KeepLast },
	}
	maps.Copy(set, loopOverrides(c, flagged))
	for name, apply := range set {
		if cmd.Flags().Changed(name) {
			apply()
		}
	}
}

func parseModuleFor(s string) (train.ModuleFor, error) {
	for i := range len(s) {
		if s[i] == '=' {
			return train.ModuleFor{Match: s[:i], Precision: s[i+1:]}, nil
		}
	}
	return train.ModuleFor{}, fmt.Errorf("--precision-for %q: want GLOB=SPEC, e.g. 'vision.**=16-mixed'", s)
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

package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/weftml/weft/models"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/strategy"
	"github.com/weftml/weft/train"
)

// runFlags are the flags of a run, weft train's and weft plan's alike:
// one registration and one resolution, so that weft plan ARGS describes
// the run weft train ARGS trains.
type runFlags struct {
	config string // a YAML file of settings
	resume bool
}

// register adds a run's flags to fs: the settings (bindSettings), then
// the flags that are not settings of the config.
func (f *runFlags) register(fs *pflag.FlagSet) {
	c, rules := train.Defaults(), []string(nil)
	bindSettings(fs, &c, &rules)
	fs.StringVar(&f.config, "config", "", "YAML file with any of the run's settings; flags given explicitly override it")
	fs.BoolVar(&f.resume, "resume", false, "continue from the latest checkpoint in --out")
}

// resolve is the run's config: the defaults, then --config's YAML, then
// the settings' flags given explicitly in fs (parsed by register's
// flags), then the --precision-for rules after the config's modules.
// Each flat key of the YAML is a deprecation line on stderr.
func (f *runFlags) resolve(fs *pflag.FlagSet, stderr io.Writer) (train.Config, error) {
	c := train.Defaults()
	if f.config != "" {
		deprecated, err := train.LoadConfig(f.config, &c)
		if err != nil {
			return train.Config{}, err
		}
		for _, d := range deprecated {
			fmt.Fprintln(stderr, "weft: warning:", d)
		}
	}
	var rules []string
	onto := pflag.NewFlagSet("settings", pflag.ContinueOnError)
	bindSettings(onto, &c, &rules)
	var err error
	fs.Visit(func(given *pflag.Flag) {
		if to := onto.Lookup(given.Name); to != nil && err == nil {
			err = copyValue(to.Value, given.Value)
		}
	})
	if err != nil {
		return train.Config{}, err
	}
	for _, r := range rules {
		m, err := parseModuleFor(r)
		if err != nil {
			return train.Config{}, err
		}
		c.Modules = append(c.Modules, m)
	}
	return c, nil
}

// copyValue sets to to from's value: a list whole, anything else by its
// text, which every flag type here reads back exactly.
func copyValue(to, from pflag.Value) error {
	if list, ok := from.(pflag.SliceValue); ok {
		return to.(pflag.SliceValue).Replace(list.GetSlice())
	}
	return to.Set(from.String())
}

// bindSettings binds a flag to each setting of c that has one, its
// default c's value (binding resets the field to it), and
// --precision-for to rules. A new setting adds its flag here, and
// weft train and weft plan both take it.
func bindSettings(fs *pflag.FlagSet, c *train.Config, rules *[]string) {
	trainable := models.NamesWhere(func(s models.Spec) bool { return s.LM != nil || s.Data != nil })
	fs.StringVar(&c.Model, "model", c.Model, "model: "+strings.Join(trainable, ", "))
	fs.StringVar(&c.Precision, "precision", c.Precision, "precision spec: "+strings.Join(precision.Specs(), ", ")+", a jmp policy, or several joined by +")
	fs.StringArrayVar(rules, "precision-for", *rules, "per-module precision 'GLOB=SPEC' (repeatable), e.g. 'vision.**=16-mixed' or 'kind:Conv2d=bf16-true'")
	fs.StringVar(&c.LossScale, "loss-scale", c.LossScale, "auto (a dynamic scaler whenever a module computes in float16) or none")
	fs.StringVar(&c.Strategy, "strategy", c.Strategy, "strategy: "+strings.Join(strategy.Names(), ", "))
	fs.IntVar(&c.Devices, "devices", c.Devices, "ranks (the batch is split evenly over them)")
	fs.IntVar(&c.TP, "tp", c.TP, "tensor-parallel ranks per mesh row (divides --devices): gpt's heads and MLP split over them, --strategy runs over the rest")
	fs.IntVar(&c.ShardSize, "shard-size", c.ShardSize, "with --strategy hsdp: data-parallel ranks that split the state (divides them; default under mpirun: a host's)")
	fs.BoolVar(&c.SequenceParallel, "sequence-parallel", c.SequenceParallel, "with --tp: keep the activations between split Linears as each rank's share of the sequence (Megatron's sequence parallelism)")
	fs.StringVar(&c.Comm, "comm", c.Comm, "auto (mpi under mpirun, else local), local (ranks as goroutines) or mpi (one process per rank, under mpirun)")
	fs.DurationVar(&c.CommTimeout, "comm-timeout", c.CommTimeout, "how long a collective waits for a lost or hung peer before the run fails")
	fs.IntVar(&c.Steps, "steps", c.Steps, "optimizer steps")
	fs.IntVar(&c.BatchSize, "batch-size", c.BatchSize, "sequences or images per step")
	fs.Float64Var(&c.LR, "lr", c.LR, "AdamW learning rate")
	fs.Float64Var(&c.Beta1, "beta1", c.Beta1, "AdamW's first-moment decay")
	fs.Float64Var(&c.Beta2, "beta2", c.Beta2, "AdamW's second-moment decay")
	fs.Float64Var(&c.Eps, "eps", c.Eps, "AdamW's term added to the denominator")
	fs.Float64Var(&c.WeightDecay, "weight-decay", c.WeightDecay, "AdamW's decoupled weight decay (0: none)")
	fs.IntVar(&c.EvalEvery, "eval-every", c.EvalEvery, "steps between validation passes")
	fs.StringVar(&c.EvalPrecision, "eval-precision", c.EvalPrecision, "compute validation losses in this precision spec over the weights as trained, e.g. 32-true (default: the training precision)")
	fs.IntVar(&c.SaveEvery, "save-every", c.SaveEvery, "steps between checkpoints")
	fs.StringVar(&c.Out, "out", c.Out, "run folder")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the data order and initial weights")
	fs.StringVar(&c.InitFrom, "init-from", c.InitFrom, "start from the weights of this run folder's latest checkpoint, of a safetensors file keyed by parameter path, or of an HF model folder (config.json + model.safetensors, GPT-2 or Llama) (fine-tuning)")
	fs.StringSliceVar(&c.LoRA.Targets, "lora", c.LoRA.Targets, "train only LoRA adapters on these module globs, e.g. 'blocks.*.qkv,blocks.*.fc'")
	fs.IntVar(&c.LoRA.Rank, "lora-rank", c.LoRA.Rank, "LoRA rank")
	fs.Float64Var(&c.LoRA.Alpha, "lora-alpha", c.LoRA.Alpha, "LoRA alpha")
	fs.StringVar(&c.CorpusPart, "corpus-part", c.CorpusPart, "train gpt on the Go sources under this path prefix of GOROOT/src, e.g. net/")
	fs.StringVar(&c.Data, "data", c.Data, "train gpt on your own text: a file, a folder of text files (recursively) or a quoted glob, instead of the Go corpus")
	fs.StringVar(&c.Tokenizer, "tokenizer", c.Tokenizer, "with --data: bytes (256 ids, the default) or gpt2 (GPT-2's BPE, from --tokenizer-dir)")
	fs.StringVar(&c.TokenizerDir, "tokenizer-dir", c.TokenizerDir, "folder of GPT-2's vocab.json and merges.txt (or encoder.json and vocab.bpe) for --tokenizer gpt2")
	fs.Float64Var(&c.ValFraction, "val-fraction", c.ValFraction, "with --data: the fraction of each file, from its end, held out for validation")
	fs.StringSliceVar(&c.ActivationCheckpointing, "activation-checkpointing", c.ActivationCheckpointing, "recompute these modules' forward in backward instead of keeping their activations, e.g. 'blocks.*'")
	fs.StringSliceVar(&c.ShardUnits, "shard-units", c.ShardUnits, "modules that are sharding units of their own, e.g. 'blocks.*,head' (default: every transformer block, each top-level child otherwise)")
	fs.BoolVar(&c.ReshardAfterForward, "reshard-after-forward", c.ReshardAfterForward, "fsdp: free a unit's gathered parameters after its forward and gather them again for its backward")
	fs.StringVar(&c.OnNaN, "on-nan", c.OnNaN, "a non-finite loss without a loss scaler: stop (with a diagnosis) or skip the batch")
	fs.IntVar(&c.KeepLast, "keep-last", c.KeepLast, "checkpoints kept in --out/checkpoints, the newest (older ones are removed as new ones are saved)")
	fs.StringVar(&c.ResumeFrom, "resume-from", c.ResumeFrom, "continue from this checkpoint instead of the latest: a step of the run in --out (implies --resume), or a checkpoint folder")
	fs.BoolVar(&c.Overwrite, "overwrite", c.Overwrite, "start over in an --out that holds a run, removing its checkpoints and metrics")
	fs.StringVar(&c.MemoryCheck, "memory-check", c.MemoryCheck, "on: refuse, before allocating, a run whose predicted peak does not fit in the memory its ranks can have; off: run it anyway")
	bindLoopFlags(fs, c)
}

// bindLoopFlags binds the training loop's settings: gradient
// accumulation, clipping, the learning-rate schedule and the loggers.
func bindLoopFlags(fs *pflag.FlagSet, c *train.Config) {
	fs.IntVar(&c.GradAccum, "grad-accum", c.GradAccum, "split each step's batch into this many micro-batches whose gradients add up before the step")
	fs.StringVar(&c.GradSync, "grad-sync", c.GradSync, "when accumulated gradients are reduced across ranks: auto (ddp, zero1: after the last micro-batch; zero2, fsdp: after each, keeping them sharded), every, or last (zero2, fsdp: whole gradients on every rank meanwhile)")
	fs.Float64Var(&c.ClipValue, "clip-value", c.ClipValue, "clamp every gradient element to ±this before the step (0: no clipping)")
	fs.Float64Var(&c.ClipNorm, "clip-norm", c.ClipNorm, "scale the gradients down to this global L2 norm before the step when above it, as clip_grad_norm_ (0: no clipping)")
	fs.StringVar(&c.LRSchedule.Name, "lr-schedule", c.LRSchedule.Name, "learning rate per step, --lr its peak: "+strings.Join(optim.ScheduleNames, ", "))
	fs.IntVar(&c.LRSchedule.Warmup, "warmup-steps", c.LRSchedule.Warmup, "cosine: steps of linear warmup")
	fs.IntVar(&c.LRSchedule.Decay, "lr-decay-steps", c.LRSchedule.Decay, "cosine: the step at which the rate reaches --min-lr (0: --steps)")
	fs.Float64Var(&c.LRSchedule.MinLR, "min-lr", c.LRSchedule.MinLR, "cosine: the final rate (0: --lr/10)")
	fs.IntVar(&c.LRSchedule.Every, "lr-step-every", c.LRSchedule.Every, "step: steps between decays")
	fs.Float64Var(&c.LRSchedule.Gamma, "lr-gamma", c.LRSchedule.Gamma, "step: the factor of each decay")
	fs.StringSliceVar(&c.Loggers, "logger", c.Loggers, "loggers: jsonl (DIR/metrics.jsonl, always) and csv (DIR/metrics.csv), e.g. jsonl,csv")
}

func parseModuleFor(s string) (train.ModuleFor, error) {
	match, spec, ok := strings.Cut(s, "=")
	if !ok {
		return train.ModuleFor{}, fmt.Errorf("--precision-for %q: want GLOB=SPEC, e.g. 'vision.**=16-mixed'", s)
	}
	return train.ModuleFor{Match: match, Precision: spec}, nil
}

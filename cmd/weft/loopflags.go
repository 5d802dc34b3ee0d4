package main

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/train"
)

// registerLoopFlags adds the training loop's flags: gradient accumulation,
// clipping, the learning-rate schedule and the loggers.
func registerLoopFlags(fs *pflag.FlagSet, c *train.Config) {
	fs.IntVar(&c.GradAccum, "grad-accum", c.GradAccum, "split each step's batch into this many micro-batches whose gradients add up before the step")
	fs.StringVar(&c.GradSync, "grad-sync", c.GradSync, "when accumulated gradients are reduced across ranks: auto (ddp, zero1: after the last micro-batch; zero2, fsdp: after each, keeping them sharded), every, or last (zero2, fsdp: whole gradients on every rank meanwhile)")
	fs.Float64Var(&c.ClipValue, "clip-value", c.ClipValue, "clamp every gradient element to ±this before the step (0: no clipping)")
	fs.StringVar(&c.LRSchedule.Name, "lr-schedule", c.LRSchedule.Name, "learning rate per step, --lr its peak: "+strings.Join(optim.ScheduleNames, ", "))
	fs.IntVar(&c.LRSchedule.Warmup, "warmup-steps", c.LRSchedule.Warmup, "cosine: steps of linear warmup")
	fs.IntVar(&c.LRSchedule.Decay, "lr-decay-steps", c.LRSchedule.Decay, "cosine: the step at which the rate reaches --min-lr (0: --steps)")
	fs.Float64Var(&c.LRSchedule.MinLR, "min-lr", c.LRSchedule.MinLR, "cosine: the final rate (0: --lr/10)")
	fs.IntVar(&c.LRSchedule.Every, "lr-step-every", c.LRSchedule.Every, "step: steps between decays")
	fs.Float64Var(&c.LRSchedule.Gamma, "lr-gamma", c.LRSchedule.Gamma, "step: the factor of each decay")
	fs.StringSliceVar(&c.Loggers, "logger", c.Loggers, "loggers: jsonl (DIR/metrics.jsonl, always) and csv (DIR/metrics.csv), e.g. jsonl,csv")
}

// loopOverrides are overrideChanged's entries for the loop's flags.
func loopOverrides(c *train.Config, flagged train.Config) map[string]func() {
	return map[string]func(){
		"grad-accum": func() { c.GradAccum = flagged.GradAccum }, "grad-sync": func() { c.GradSync = flagged.GradSync },
		"clip-value": func() { c.ClipValue = flagged.ClipValue }, "lr-schedule": func() { c.LRSchedule.Name = flagged.LRSchedule.Name },
		"warmup-steps": func() { c.LRSchedule.Warmup = flagged.LRSchedule.Warmup }, "lr-decay-steps": func() { c.LRSchedule.Decay = flagged.LRSchedule.Decay },
		"min-lr": func() { c.LRSchedule.MinLR = flagged.LRSchedule.MinLR }, "lr-step-every": func() { c.LRSchedule.Every = flagged.LRSchedule.Every },
		"lr-gamma": func() { c.LRSchedule.Gamma = flagged.LRSchedule.Gamma }, "logger": func() { c.Loggers = flagged.Loggers },
	}
}

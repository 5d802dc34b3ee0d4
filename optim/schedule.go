package optim

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Schedule is a learning-rate schedule: the rate of each optimizer step
// (0 first) as a pure function of the step, so that a run resumed at step
// s continues with the rates it would have had.
type Schedule interface {
	LR(step int) float64
}

// Constant keeps the learning rate at Rate.
type Constant struct {
	Rate float64 // 3e-3
}

func (c Constant) LR(int) float64 { return c.Rate }

// Cosine is nanoGPT's get_lr: a linear warmup to Max over Warmup steps,
// then a cosine decay to Min at step Decay, and Min after it.
type Cosine struct {
	Max, Min float64 // 6e-4, 6e-5
	Warmup   int     // 2000 steps
	Decay    int     // 600000: the step at which the rate reaches Min
}

func (c Cosine) LR(step int) float64 {
	if step < c.Warmup {
		return c.Max * float64(step+1) / float64(c.Warmup+1)
	}
	if step > c.Decay {
		return c.Min
	}
	ratio := float64(step-c.Warmup) / float64(c.Decay-c.Warmup)
	return c.Min + 0.5*(1+math.Cos(math.Pi*ratio))*(c.Max-c.Min)
}

// StepDecay multiplies the rate by Gamma every Every steps
// (torch.optim.lr_scheduler.StepLR).
type StepDecay struct {
	Rate  float64 // 3e-3
	Gamma float64 // 0.5
	Every int     // 100 steps
}

func (s StepDecay) LR(step int) float64 { return s.Rate * math.Pow(s.Gamma, float64(step/s.Every)) }

// ScheduleConfig describes a schedule by name, as a config file or the
// command line gives it; the zero value of a field takes the default
// that Build names.
type ScheduleConfig struct {
	Name   string  `yaml:"name"`         // constant, cosine or step
	Warmup int     `yaml:"warmup_steps"` // cosine: steps of linear warmup (0)
	Decay  int     `yaml:"decay_steps"`  // cosine: the step the rate reaches min_lr (0: the run's last)
	MinLR  float64 `yaml:"min_lr"`       // cosine: the final rate (0: lr/10, nanoGPT's)
	Every  int     `yaml:"every"`        // step: steps between decays
	Gamma  float64 `yaml:"gamma"`        // step: the factor of each decay
}

// ScheduleNames lists the schedules Build knows.
var ScheduleNames = []string{"constant", "cosine", "step"}

// Build returns the schedule c describes around the peak rate lr, for a
// run of steps optimizer steps; bad settings get an error naming them.
func (c ScheduleConfig) Build(lr float64, steps int) (Schedule, error) {
	if err := c.unread(); err != nil {
		return nil, err
	}
	switch c.Name {
	case "", "constant":
		return Constant{Rate: lr}, nil
	case "cosine":
		cos := Cosine{Max: lr, Min: c.MinLR, Warmup: c.Warmup, Decay: c.Decay}
		if cos.Decay == 0 {
			cos.Decay = steps
		}
		if cos.Min == 0 {
			cos.Min = lr / 10
		}
		switch {
		case cos.Warmup < 0 || cos.Decay <= cos.Warmup:
			return nil, fmt.Errorf("lr schedule cosine: warmup_steps %d and decay_steps %d: want 0 ≤ warmup < decay", cos.Warmup, cos.Decay)
		case cos.Min < 0 || cos.Min > lr:
			return nil, fmt.Errorf("lr schedule cosine: min_lr %g: want 0 ≤ min_lr ≤ lr %g", cos.Min, lr)
		}
		return cos, nil
	case "step":
		if c.Every < 1 || !(c.Gamma > 0) {
			return nil, fmt.Errorf("lr schedule step: every %d and gamma %g: want every ≥ 1 and gamma > 0", c.Every, c.Gamma)
		}
		return StepDecay{Rate: lr, Gamma: c.Gamma, Every: c.Every}, nil
	}
	return nil, fmt.Errorf("lr schedule %q: accepted are %s", c.Name, strings.Join(ScheduleNames, ", "))
}

// unread reports the first setting c gives that its schedule does not
// read (warmup under the constant schedule), naming its flag and key.
func (c ScheduleConfig) unread() error {
	name := cmp.Or(c.Name, "constant")
	if !slices.Contains(ScheduleNames, name) {
		return nil // Build names the accepted schedules
	}
	for _, f := range []struct {
		flag, key, readBy string
		value             float64
	}{
		{"--warmup-steps", "warmup_steps", "cosine", float64(c.Warmup)},
		{"--lr-decay-steps", "decay_steps", "cosine", float64(c.Decay)},
		{"--min-lr", "min_lr", "cosine", c.MinLR},
		{"--lr-step-every", "every", "step", float64(c.Every)},
		{"--lr-gamma", "gamma", "step", c.Gamma},
	} {
		if f.value != 0 && f.readBy != name {
			return fmt.Errorf("%s %g with --lr-schedule %s: %s applies to %s only (choose --lr-schedule %s, or drop it)", f.flag, f.value, name, f.key, f.readBy, f.readBy)
		}
	}
	return nil
}

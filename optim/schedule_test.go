package optim

import (
	"math"
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-15*math.Max(1, math.Abs(b)) }

// TestCosine: nanoGPT's get_lr at the points its definition fixes: the
// first warmup step is max/(warmup+1), the rate peaks at the end of the
// warmup, is halfway between max and min halfway through the decay, and
// min from the decay's end on.
func TestCosine(t *testing.T) {
	c := Cosine{Max: 6e-4, Min: 6e-5, Warmup: 9, Decay: 109}
	for _, p := range []struct {
		step int
		want float64
	}{
		{0, 6e-4 / 10}, {4, 6e-4 * 5 / 10}, {8, 6e-4 * 9 / 10}, {9, 6e-4}, {59, (6e-4 + 6e-5) / 2},
		{109, 6e-5}, {110, 6e-5}, {5000, 6e-5},
	} {
		if got := c.LR(p.step); !near(got, p.want) {
			t.Errorf("step %d: lr %v, want %v", p.step, got, p.want)
		}
	}
	for s := c.Warmup; s < c.Decay; s++ { // the decay never rises
		if c.LR(s+1) > c.LR(s) {
			t.Fatalf("lr rises from step %d (%v) to %d (%v)", s, c.LR(s), s+1, c.LR(s+1))
		}
	}
	// a quarter of the way: cos(pi/4) = 1/sqrt(2)
	if got, want := c.LR(34), 6e-5+0.5*(1+1/math.Sqrt2)*(6e-4-6e-5); !near(got, want) {
		t.Errorf("a quarter through the decay: lr %v, want %v", got, want)
	}
}

func TestStepDecay(t *testing.T) {
	s := StepDecay{Rate: 1, Gamma: 0.5, Every: 3}
	for step, want := range []float64{1, 1, 1, 0.5, 0.5, 0.5, 0.25} {
		if got := s.LR(step); got != want {
			t.Errorf("step %d: lr %v, want %v", step, got, want)
		}
	}
}

func TestScheduleConfig(t *testing.T) {
	s, err := ScheduleConfig{Name: "cosine", Warmup: 5}.Build(1e-3, 100)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Cosine{Max: 1e-3, Min: 1e-4, Warmup: 5, Decay: 100}); s != want {
		t.Errorf("cosine with defaults: %+v, want %+v", s, want)
	}
	if s, _ := (ScheduleConfig{}).Build(2e-3, 10); s != (Constant{Rate: 2e-3}) {
		t.Errorf("no name: %+v, want a constant 2e-3", s)
	}
	for _, c := range []struct {
		cfg  ScheduleConfig
		want string
	}{
		{ScheduleConfig{Name: "linear"}, `lr schedule "linear": accepted are constant, cosine, step`},
		{ScheduleConfig{Name: "cosine", Warmup: 100}, "warmup_steps 100 and decay_steps 100"},
		{ScheduleConfig{Name: "cosine", MinLR: 1}, "min_lr 1"},
		{ScheduleConfig{Name: "step", Gamma: 0.5}, "every 0 and gamma 0.5"},
		{ScheduleConfig{Name: "step", Every: 10}, "every 10 and gamma 0"},
		{ScheduleConfig{Warmup: 5}, "--warmup-steps 5 with --lr-schedule constant: warmup_steps applies to cosine only"},
		{ScheduleConfig{Name: "constant", MinLR: 0.1}, "--min-lr 0.1 with --lr-schedule constant: min_lr applies to cosine only"},
		{ScheduleConfig{Name: "cosine", Gamma: 0.5}, "--lr-gamma 0.5 with --lr-schedule cosine: gamma applies to step only"},
		{ScheduleConfig{Name: "step", Every: 10, Gamma: 0.5, Decay: 50}, "--lr-decay-steps 50 with --lr-schedule step: decay_steps applies to cosine only"},
	} {
		_, err := c.cfg.Build(1e-3, 100)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: error %v, want one line with %q", c.cfg, err, c.want)
		}
	}
}

package train

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/fp8"
)

// TestConfigSpecArgs: spec arguments in a config's precision: and
// modules: reach the plugins the run builds.
func TestConfigSpecArgs(t *testing.T) {
	c := Defaults()
	yaml := "precision:\n  spec: bf16-mixed+fp8(margin=2,history=8)\n  modules:\n    - match: head\n      precision: fp8(algo=most_recent)\n"
	if _, err := ParseConfig([]byte(yaml), &c); err != nil {
		t.Fatal(err)
	}
	pol, _, err := c.policy(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := pol.Default.String(); got != "bf16-mixed+fp8(margin=2,history=8)" {
		t.Errorf("precision %q", got)
	}
	root, err := pol.Default.New()
	if err != nil {
		t.Fatal(err)
	}
	if d := precision.Members(root)[1].(*fp8.Delayed); d.Margin != 2 || d.HistoryLen != 8 {
		t.Errorf("fp8 margin %d, history %d; want 2 and 8", d.Margin, d.HistoryLen)
	}
	head, err := pol.Rules[0].Spec.New()
	if err != nil {
		t.Fatal(err)
	}
	if d := head.(*fp8.Delayed); d.Algo != fp8.AmaxMostRecent || d.HistoryLen != 1024 {
		t.Errorf("head's fp8 algo %v, history %d; want most_recent and the default 1024", d.Algo, d.HistoryLen)
	}
}

// TestScalerKnobsResume: 16-mixed's GradScaler arguments reach the run,
// and a resume under other knobs announces them and trains with them on
// the checkpoint's scale: an interval of 1 grows the scale by the new
// factor at the first finite step.
func TestScalerKnobsResume(t *testing.T) {
	c := tinyConfig(t, "16-mixed(init_scale=1024,growth_interval=1000)")
	c.Steps, c.SaveEvery, c.EvalEvery = 2, 2, 100
	if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	ms, err := readMetrics(filepath.Join(c.Out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if ms[1].Skipped || ms[1].LossScale != 1024 {
		t.Fatalf("step 1: skipped %v, loss scale %v; want 1024, the init_scale", ms[1].Skipped, ms[1].LossScale)
	}
	r := c
	r.Steps, r.Precision = 3, "16-mixed(growth_factor=4,growth_interval=1)"
	obs := &warnings{}
	if _, err := Run(context.Background(), r, true, obs); err != nil {
		t.Fatal(err)
	}
	want := "precision 16-mixed(init_scale=1024,growth_interval=1000) -> 16-mixed(growth_factor=4,growth_interval=1)"
	if len(obs.lines) != 2 || !strings.Contains(obs.lines[1], want) {
		t.Errorf("resume said\n%s\nwant a line with %s", strings.Join(obs.lines, "\n"), want)
	}
	if ms, err = readMetrics(filepath.Join(c.Out, "metrics.jsonl")); err != nil {
		t.Fatal(err)
	}
	if ms[2].Skipped || ms[2].LossScale != 4096 {
		t.Errorf("step 2: skipped %v, loss scale %v; want 4096 (1024 grown by 4)", ms[2].Skipped, ms[2].LossScale)
	}
}

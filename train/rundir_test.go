package train

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/optim"
)

// heldAtPlan is an Observer that stops its run before the first step until
// resume is closed, after closing planned.
type heldAtPlan struct {
	quiet
	planned, resume chan struct{}
}

func (h heldAtPlan) Plan(*fabric.Plan, int) {
	close(h.planned)
	<-h.resume
}

// TestRunFolderHasOneOwner: a second run into a folder a run is training
// in fails at once, naming the first's process, and the first finishes
// with its own seed in every checkpoint.
func TestRunFolderHasOneOwner(t *testing.T) {
	first := tinyConfig(t, "32-true")
	first.Steps, first.SaveEvery, first.Seed = 4, 2, 7
	held := heldAtPlan{planned: make(chan struct{}), resume: make(chan struct{})}
	done := make(chan error)
	go func() {
		_, err := Run(context.Background(), first, false, held)
		done <- err
	}()
	<-held.planned
	second := first
	second.Seed = 8
	began := time.Now()
	_, err := Run(context.Background(), second, false, quiet{})
	took := time.Since(began)
	close(held.resume)
	want := fmt.Sprintf("%s is in use by pid %d", first.Out, os.Getpid())
	if err == nil || !strings.Contains(err.Error(), want) || took > time.Second {
		t.Errorf("a second run into a folder in use: %v after %v, want %q within a second", err, took, want)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, step := range []int{2, 4} {
		m, err := readManifestAt(filepath.Join(first.Out, "checkpoints", stepFolder(step)))
		if err != nil || m.Config.Seed != first.Seed {
			t.Errorf("checkpoint of step %d: %v, seed %d; want the first run's seed %d", step, err, m.Config.Seed, first.Seed)
		}
	}
}

// TestFreshRunIntoARun: a fresh run into a folder that holds a run is
// refused and changes nothing; with Overwrite it starts over and says what
// it removed.
func TestFreshRunIntoARun(t *testing.T) {
	c := tinyConfig(t, "32-true")
	c.Steps, c.SaveEvery = 6, 3
	if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	again := c
	again.Steps = 2
	_, err := Run(context.Background(), again, false, quiet{})
	want := c.Out + " holds a run (checkpoints of steps 3, 6, metrics.jsonl, loss.png, plan.json): pass --resume to continue it, --overwrite to start over, or another --out"
	if err == nil || err.Error() != want {
		t.Fatalf("a fresh run into a run's folder: %v, want %q", err, want)
	}
	if got := len(losses(t, c.Out)); got != 6 {
		t.Fatalf("the refused run left %d lines in metrics.jsonl, want the first run's 6", got)
	}
	again.Overwrite = true
	obs := &warnings{}
	if _, err := Run(context.Background(), again, false, obs); err != nil {
		t.Fatal(err)
	}
	said := "overwrite: removed the run in " + c.Out + " (checkpoints of steps 3, 6, metrics.jsonl, loss.png, plan.json)"
	if !slices.Equal(obs.lines, []string{said}) {
		t.Errorf("overwrite said %q, want %q", obs.lines, said)
	}
	if got := checkpointSteps(filepath.Join(c.Out, "checkpoints")); !slices.Equal(got, []int{2}) || len(losses(t, c.Out)) != 2 {
		t.Errorf("after overwrite: checkpoints of steps %v and %d metrics lines, want [2] and 2", got, len(losses(t, c.Out)))
	}
	again.Overwrite = false
	if _, err := Run(context.Background(), again, true, quiet{}); err == nil || !strings.Contains(err.Error(), "already trained 2 steps") {
		t.Errorf("resume after overwrite: %v, want the overwriting run's 2 steps", err)
	}
}

// TestResumeFromAnOlderCheckpoint: KeepLast checkpoints are kept; a
// corrupt latest fails a resume with the newest intact checkpoint and the
// setting that resumes from it, after removing what a stopped save left;
// resuming from it ends with the losses of an uninterrupted run.
func TestResumeFromAnOlderCheckpoint(t *testing.T) {
	straight := tinyConfig(t, "32-true")
	straight.Steps, straight.SaveEvery = 8, 1
	if _, err := ParseConfig([]byte("checkpoint: {keep_last: 3}\n"), &straight); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), straight, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	split := straight
	split.Out, split.Steps = t.TempDir(), 5
	if _, err := Run(context.Background(), split, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	ckpts := filepath.Join(split.Out, "checkpoints")
	if got := checkpointSteps(ckpts); !slices.Equal(got, []int{3, 4, 5}) {
		t.Fatalf("keep last 3 kept the checkpoints of steps %v, want [3 4 5]", got)
	}
	stale := filepath.Join(ckpts, ".tmp-step-000006")
	if err := os.MkdirAll(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(ckpts, stepFolder(5), "state.safetensors")
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 1
	os.WriteFile(state, b, 0o644)
	split.Steps = straight.Steps
	obs := &warnings{}
	_, err = Run(context.Background(), split, true, obs)
	want := "the newest intact checkpoint is " + filepath.Join(ckpts, stepFolder(4)) + ": resume from it with --resume-from 4"
	if err == nil || !strings.Contains(err.Error(), "does not match its SHA-256") || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("resuming from a corrupt latest: %v, want the digest mismatch and %q", err, want)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) || len(obs.lines) != 1 || !strings.Contains(obs.lines[0], "removed "+stale) {
		t.Errorf("the stale %s: %v, said %q; want it removed and said so", stale, err, obs.lines)
	}
	split.ResumeFrom = "4"
	obs = &warnings{}
	if _, err := Run(context.Background(), split, true, obs); err != nil {
		t.Fatal(err)
	}
	if said := "resumed from step 4 (" + filepath.Join(ckpts, stepFolder(4)) + ")"; !slices.Equal(obs.lines, []string{said}) {
		t.Errorf("resume from step 4 said %q, want %q", obs.lines, said)
	}
	sameLosses(t, straight.Out, split.Out)
	split.ResumeFrom = "2"
	if _, err := Run(context.Background(), split, true, obs); err == nil || !strings.HasSuffix(err.Error(), "holds no checkpoint of step 2, only of steps 6, 7, 8") {
		t.Errorf("resume from a pruned step: %v", err)
	}
}

// TestManifestBeforeOptimizerSettings: a checkpoint written before
// AdamW's betas, eps and weight decay were settings reads with the values
// its run trained with, today's defaults.
func TestManifestBeforeOptimizerSettings(t *testing.T) {
	c, err := runConfig([]byte(`{"Model":"gpt","LR":0.001}`))
	if err != nil {
		t.Fatal(err)
	}
	d := Defaults()
	if got, want := c.adamW(), (optim.AdamWConfig{LR: 0.001, Beta1: d.Beta1, Beta2: d.Beta2, Eps: d.Eps, WeightDecay: d.WeightDecay}); got != want {
		t.Errorf("AdamW of an older checkpoint %+v, want %+v", got, want)
	}
}

// TestResumeListsChanges: a resume names every changed setting on one line,
// old and new, and refuses other data with one line naming both.
func TestResumeListsChanges(t *testing.T) {
	c := tinyConfig(t, "32-true")
	c.Steps, c.SaveEvery = 2, 2
	if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
		t.Fatal(err)
	}
	r := c
	r.Steps, r.LR, r.Seed, r.BatchSize, r.GradAccum = 3, 1e-3, 5, 8, 2
	r.Beta1, r.WeightDecay, r.ClipNorm, r.EvalPrecision = 0.8, 0, 1, "32-true"
	r.LRSchedule = optim.ScheduleConfig{Name: "cosine", Warmup: 1}
	obs := &warnings{}
	if _, err := Run(context.Background(), r, true, obs); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(c.Out, "checkpoints", stepFolder(2))
	want := "resume: changed since checkpoint " + ckpt + ": seed 1 -> 5, lr 0.003 -> 0.001, lr-schedule constant -> cosine (warmup 1, to 0.0001 at step 3), beta1 0.9 -> 0.8, weight-decay 0.1 -> 0, batch-size 4 -> 8, grad-accum 1 -> 2, clip-norm 0 -> 1, eval-precision the training precision -> 32-true"
	if len(obs.lines) != 2 || obs.lines[1] != want {
		t.Errorf("resume with changed settings said\n%s\nwant the resume line and\n%s", strings.Join(obs.lines, "\n"), want)
	}
	r.Steps, r.CorpusPart = 4, "strings/"
	_, err := Run(context.Background(), r, true, quiet{})
	want = fmt.Sprintf("data the bundled Go corpus (%d bytes of GOROOT/src/) -> the bundled Go corpus (%d bytes of GOROOT/src/strings/);", c.CorpusBytes, c.CorpusBytes)
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Errorf("resume on another part of the corpus: %v, want one line with %q", err, want)
	}
}

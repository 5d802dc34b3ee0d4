package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftml/weft/optim"
)

// TestTrainLoopFlags: weft train takes accumulation, clipping, a schedule
// and loggers from YAML and flags, flags winning (the config's
// grad_accum 3 cannot split a batch of 4; the flag's 2 can), logs each
// step's scheduled lr and writes metrics.csv beside metrics.jsonl.
func TestTrainLoopFlags(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(dir, "run.yaml", []byte("optim:\n  grad_accum: 3\n  clip_value: 0.5\n  lr_schedule:\n    name: cosine\n    warmup_steps: 1\n    min_lr: 1e-4\ncheckpoint: {loggers: [jsonl]}\n"))
	out := filepath.Join(dir, "run")
	msg, code := run("train", "--config", cfg, "--model", "cnn", "--steps", "4", "--batch-size", "4", "--lr", "1e-3",
		"--grad-accum", "2", "--lr-decay-steps", "3", "--logger", "jsonl,csv", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, msg)
	}
	b, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	want := optim.Cosine{Max: 1e-3, Min: 1e-4, Warmup: 1, Decay: 3}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i, line := range lines {
		var m struct {
			LR float64 `json:"lr"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if m.LR != want.LR(i) {
			t.Errorf("step %d: lr %v, want %v", i, m.LR, want.LR(i))
		}
	}
	csv, err := os.ReadFile(filepath.Join(out, "metrics.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if rows := strings.Split(strings.TrimSpace(string(csv)), "\n"); len(rows) != 1+len(lines) || !strings.HasPrefix(rows[0], "step,loss,") {
		t.Errorf("metrics.csv: %q; want a header and %d rows", rows, len(lines))
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mpirunjob "github.com/weftml/weft/internal/mpirun"
)

// TestPlanPredictsTrainPeak: weft plan ARGS predicts the allocator peak
// that weft train ARGS --steps 3 measures (metrics.jsonl's
// peak_alloc_mib, over each step and its evaluation) within 15%: a
// rank's where each rank is a process of its own (one device, or Open
// MPI processes), and the process's (process_bytes) where the ranks are
// in-process, sharing its pool and its counters; weft train's closing
// memory line states the same figure.
func TestPlanPredictsTrainPeak(t *testing.T) {
	bin := buildWeft(t) // a process of its own: the pool's counters are the process's
	for _, tc := range []struct {
		name string
		args []string
		mpi  int // ranks as processes under mpirun; 0 for one process
	}{
		{"default", nil, 0},
		{"lora", []string{"--lora", "blocks.*.qkv"}, 0},
		{"llama", []string{"--model", "llama"}, 0},
		{"llama grad-accum", []string{"--model", "llama", "--grad-accum", "2"}, 0}, // evaluation's whole batch peaks
		{"fsdp in-process", []string{"--strategy", "fsdp", "--devices", "2"}, 0},
		{"fsdp", []string{"--strategy", "fsdp", "--devices", "2"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code := run(append([]string{"plan", "--json"}, tc.args...)...)
			var p struct {
				Peak struct {
					Bytes       float64
					Process     float64 `json:"process_bytes"`
					ProcessMost float64 `json:"process_most_bytes"`
				} `json:"peak_per_rank"`
			}
			if err := json.Unmarshal([]byte(out), &p); code != 0 || err != nil || p.Peak.Bytes == 0 {
				t.Fatalf("plan: exit %d, %v: %s", code, err, out)
			}
			dir := t.TempDir()
			train := append([]string{"train", "--steps", "3", "--out", dir}, tc.args...)
			want, most, of := p.Peak.Bytes, p.Peak.Bytes, "a rank"
			if tc.mpi > 0 {
				trainUnderMpirun(t, tc.mpi, bin, train)
			} else {
				if p.Peak.Process != p.Peak.Bytes {
					want, most, of = p.Peak.Process, p.Peak.ProcessMost, "the process"
				}
				out, err := exec.Command(bin, train...).CombinedOutput()
				if err != nil {
					t.Fatalf("train: %v: %s", err, out)
				}
				line := fmt.Sprintf("predicted %.1f MiB", want/(1<<20))
				if most > want {
					line = fmt.Sprintf("predicted %.1f-%.1f MiB", want/(1<<20), most/(1<<20))
				}
				if !strings.Contains(string(out), line) {
					t.Errorf("train's memory line does not say %q:\n%s", line, out)
				}
			}
			measured := peakMiB(t, dir) * (1 << 20)
			t.Logf("predicted %.2f-%.2f MiB %s, measured %.2f", want/(1<<20), most/(1<<20), of, measured/(1<<20))
			// In-process ranks peak anywhere from want (one rank's transients
			// live) to most (every rank's), as the scheduler interleaves them.
			if want-measured > 0.15*measured || measured-most > 0.15*measured {
				t.Errorf("plan predicts %.2f-%.2f MiB %s, train measured %.2f", want/(1<<20), most/(1<<20), of, measured/(1<<20))
			}
		})
	}
}

// trainUnderMpirun runs weft with args as n Open MPI processes; it skips
// the test without mpirun.
func trainUnderMpirun(t *testing.T, n int, bin string, args []string) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil || testing.Short() {
		t.Skip("mpirun not installed (apt-get install openmpi-bin libopenmpi-dev) or -short")
	}
	job := append(append(mpirunArgs(n), bin), append(args, "--comm", "mpi")...)
	if out, err := mpirunjob.Retry(func() ([]byte, error) { return exec.Command(mpirun, job...).CombinedOutput() }); err != nil {
		t.Fatalf("mpirun: %v\n%s", err, out)
	}
}

// peakMiB is the largest peak_alloc_mib of the run in dir.
func peakMiB(t *testing.T, dir string) float64 {
	b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var peak float64
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m struct {
			Peak float64 `json:"peak_alloc_mib"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		peak = max(peak, m.Peak)
	}
	return peak
}

// TestTrainRefusesWhatCannotFit: a batch whose predicted peak is far
// beyond this machine's memory is refused before anything is allocated,
// in one line naming the predicted need and the budget, within 5 s, and
// the run folder is not made.
func TestTrainRefusesWhatCannotFit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	began := time.Now()
	out, code := run("train", "--batch-size", "1000000", "--steps", "1", "--out", dir)
	took := time.Since(began)
	if code != 1 || strings.Count(strings.TrimSpace(out), "\n") != 0 || strings.Contains(out, "goroutine") || took > 5*time.Second {
		t.Fatalf("exit %d after %v:\n%s", code, took, out)
	}
	for _, want := range []string{"memory: the run needs about", "MiB a rank", "more than the", "what fits: --batch-size", "--memory-check off"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal lacks %q: %s", want, out)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the refused run made its folder: %v", err)
	}
}

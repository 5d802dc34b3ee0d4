package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/train"
)

// TestSecondRunIsRefused: weft train into a folder another weft train is
// training in exits non-zero within a second, naming the first's process,
// and the first ends with its own seed in every checkpoint; under mpirun a
// second job is refused as well.
func TestSecondRunIsRefused(t *testing.T) {
	bin := buildWeft(t)
	cnn := func(out, seed, steps string) []string {
		return []string{"train", "--model", "cnn", "--batch-size", "8", "--eval-every", "100000", "--save-every", "500", "--seed", seed, "--steps", steps, "--out", out}
	}
	t.Run("local", func(t *testing.T) {
		out := t.TempDir()
		first := exec.Command(bin, cnn(out, "7", "1000000")...)
		if err := first.Start(); err != nil {
			t.Fatal(err)
		}
		defer first.Process.Kill()
		waitForFile(t, filepath.Join(out, "metrics.jsonl"), 30*time.Second)
		began := time.Now()
		res, err := exec.Command(bin, cnn(out, "8", "3")...).CombinedOutput()
		took := time.Since(began)
		want := fmt.Sprintf("weft: %s is in use by pid %d", out, first.Process.Pid)
		if err == nil || !strings.Contains(string(res), want) || took > time.Second {
			t.Errorf("a second run into %s: %v after %v, said\n%s\nwant a failure within a second saying %q", out, err, took, res, want)
		}
		first.Process.Signal(syscall.SIGINT)
		if err := first.Wait(); err == nil || first.ProcessState.ExitCode() != 130 {
			t.Fatalf("the first run, stopped: %v, want exit 130", err)
		}
		seedsAre(t, out, 7)
	})
	t.Run("mpirun", func(t *testing.T) {
		mpirun, err := exec.LookPath("mpirun")
		if err != nil || testing.Short() {
			t.Skip("mpirun not installed or -short")
		}
		out := t.TempDir()
		job := func(seed, steps string) *exec.Cmd {
			args := append(mpirunArgs(2), append([]string{bin}, cnn(out, seed, steps)...)...)
			return exec.Command(mpirun, append(args, "--strategy", "ddp", "--devices", "2")...)
		}
		first := job("7", "3000")
		if err := first.Start(); err != nil {
			t.Fatal(err)
		}
		defer first.Process.Kill()
		waitForFile(t, filepath.Join(out, "metrics.jsonl"), 60*time.Second)
		res, err := job("8", "3").CombinedOutput()
		if err == nil || !strings.Contains(string(res), "weft: "+out+" is in use by pid ") {
			t.Errorf("a second mpirun job into %s: %v, said\n%s", out, err, res)
		}
		if err := first.Wait(); err != nil {
			t.Fatalf("the first job: %v", err)
		}
		seedsAre(t, out, 7)
	})
}

// seedsAre requires every checkpoint of run folder out to be of seed.
func seedsAre(t *testing.T, out string, seed uint64) {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(out, "checkpoints", "step-*"))
	if len(dirs) == 0 {
		t.Fatalf("no checkpoint in %s", out)
	}
	for _, dir := range dirs {
		m, err := checkpoint.ReadManifest(dir)
		if err != nil {
			t.Fatal(err)
		}
		var c train.Config
		if err := json.Unmarshal(m.Config, &c); err != nil || c.Seed != seed {
			t.Errorf("%s: %v, seed %d; want the first run's %d", dir, err, c.Seed, seed)
		}
	}
}

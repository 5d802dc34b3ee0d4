package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKillDuringCheckpoint kills -9 a run that checkpoints every step, at
// several moments, and requires every time that the run resumes from the
// checkpoint left behind: a crash mid-write never leaves a half-written
// checkpoint where resume looks.
func TestKillDuringCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	bin := buildWeft(t)
	out := t.TempDir()
	args := []string{"train", "--model", "cnn", "--precision", "16-mixed", "--batch-size", "8", "--save-every", "1", "--eval-every", "1000", "--out", out}
	for i, wait := range []time.Duration{0, 150, 300, 450, 600} {
		cmd := exec.Command(bin, append(args, "--steps", "100000", "--resume="+resumeFlag(i))...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitForFile(t, filepath.Join(out, "checkpoints", "latest"), time.Minute)
		time.Sleep(wait * time.Millisecond) // into later checkpoints' writes
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		// Resume and take one more step: the checkpoint must load.
		m, err := exec.Command(bin, "inspect", out).CombinedOutput()
		if err != nil {
			t.Fatalf("kill %d: no loadable checkpoint: %v\n%s", i, err, m)
		}
		step, err := strconv.Atoi(strings.TrimSuffix(strings.Fields(lastLine(string(m), "step "))[1], ","))
		if err != nil {
			t.Fatalf("kill %d: inspect says %q", i, m)
		}
		res, err := exec.Command(bin, append(args, "--resume", "--steps", strconv.Itoa(step+1))...).CombinedOutput()
		if err != nil {
			t.Fatalf("kill %d after step %d: resume failed: %v\n%s", i, step, err, res)
		}
	}
}

// waitForFile waits until path exists.
func waitForFile(t *testing.T, path string, limit time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s did not appear within %v", path, limit)
}

func resumeFlag(i int) string {
	if i == 0 {
		return "false"
	}
	return "true"
}

func lastLine(s, prefix string) string {
	var found string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			found = l
		}
	}
	return found
}

// TestDiskFullKeepsCheckpoint: a checkpoint write that fails for space
// (here: a file-size limit) stops the run with an error and leaves the
// previous checkpoint loadable.
func TestDiskFullKeepsCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash for ulimit")
	}
	bin := buildWeft(t)
	out := t.TempDir()
	args := bin + " train --steps %d --save-every 1 --eval-every 1000 --corpus-part strings/ --out " + out
	if res, err := exec.Command("bash", "-c", fmt.Sprintf(args, 2)).CombinedOutput(); err != nil {
		t.Fatalf("first run: %v\n%s", err, res)
	}
	// 512 KiB per file: the run starts, but its 1.4 MB checkpoint cannot be written.
	res, err := exec.Command("bash", "-c", "ulimit -f 512; "+fmt.Sprintf(args, 4)+" --resume").CombinedOutput()
	if err == nil || !strings.Contains(string(res), "weft: checkpoint of step 3 failed, resume loads the latest complete one: ") ||
		!strings.Contains(string(res), "file too large") {
		t.Fatalf("a checkpoint beyond the size limit must fail the run saying so: %v\n%s", err, res)
	}
	m, err := exec.Command(bin, "inspect", out).CombinedOutput()
	if err != nil || !strings.Contains(string(m), "step 2,") {
		t.Fatalf("the step-2 checkpoint must survive: %v\n%s", err, m)
	}
	if res, err := exec.Command("bash", "-c", fmt.Sprintf(args, 3)+" --resume").CombinedOutput(); err != nil {
		t.Fatalf("resuming after the failed write: %v\n%s", err, res)
	}
}

// TestBrokenShardNamed: a checkpoint with an optimizer shard missing, or
// with one from another run, fails a resume with one line naming the file.
func TestBrokenShardNamed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	bin := buildWeft(t)
	train := func(out string, more ...string) *exec.Cmd {
		return exec.Command(bin, append([]string{"train", "--model", "cnn", "--strategy", "zero1", "--devices", "2", "--batch-size", "8", "--out", out}, more...)...)
	}
	shard := filepath.Join("checkpoints", "step-000001", "optim-rank-001.safetensors")
	for name, tc := range map[string]struct {
		damage func(out string) error
		want   string
	}{
		"missing": {func(out string) error { return os.Remove(filepath.Join(out, shard)) },
			"optim-rank-001.safetensors is missing, though the manifest lists it"},
		"another run's": {func(out string) error {
			other := t.TempDir()
			if res, err := train(other, "--steps", "1", "--seed", "2").CombinedOutput(); err != nil {
				return fmt.Errorf("%v\n%s", err, res)
			}
			b, err := os.ReadFile(filepath.Join(other, shard))
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(out, shard), b, 0o644)
		}, "of optim-rank-001.safetensors does not match its SHA-256 in the manifest"},
	} {
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			if res, err := train(out, "--steps", "1").CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, res)
			}
			if err := tc.damage(out); err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd := train(out, "--steps", "2", "--resume")
			cmd.Stderr = &stderr
			err := cmd.Run()
			if msg := stderr.String(); err == nil || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, tc.want) {
				t.Fatalf("want one line saying %q; got %v:\n%s", tc.want, err, msg)
			}
		})
	}
}

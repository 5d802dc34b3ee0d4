package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftml/weft/train"
)

// tinyConfig writes the config of a gpt small enough that a test runs
// hundreds of its steps in a second.
func tinyConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiny.yaml")
	tiny := "model: {gpt: {layers: 1, width: 16, heads: 2, context: 8}}\ndata: {corpus_bytes: 262144, batch_size: 4}\neval: {batches: 1, every: 1000}\ncheckpoint: {save_every: 1000}\noptim: {steps: 3}\n"
	if err := os.WriteFile(path, []byte(tiny), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// outcome is what a finished run leaves: every metrics line without its
// timings, and the final checkpoint's bytes.
func outcome(t *testing.T, out string, steps int) (metrics, state string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var lines strings.Builder
	for line := range strings.Lines(string(b)) {
		var m train.Metrics
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		val := "-"
		if m.ValLoss != nil {
			val = fmt.Sprint(float64(*m.ValLoss))
		}
		fmt.Fprintln(&lines, m.Step, float64(m.Loss), m.LossScale, m.Skipped, val)
	}
	s, err := os.ReadFile(filepath.Join(out, "checkpoints", fmt.Sprintf("step-%06d", steps), "state.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	return lines.String(), string(s)
}

// waitForSteps waits until the run in out has logged at least n steps.
func waitForSteps(t *testing.T, out string, n int, done <-chan error) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
		if bytes.Count(b, []byte("\n")) >= n {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("the run ended (%v) before step %d", err, n)
		default:
		}
	}
	t.Fatalf("the run did not reach step %d within a minute", n)
}

// TestSignalResumeIsExact interrupts runs of a tiny gpt at random steps,
// 20 times, in 16-mixed and bf16-mixed+fp8, on one rank (12) and on two
// under mpirun (8), and resumes each: the run must stop with a checkpoint and the
// resumed run end with the metrics and weights of an uninterrupted one,
// bit for bit. One rank gets SIGINT or SIGTERM and must exit 130 or 143.
// Under mpirun, SIGINT goes to mpirun, which forwards SIGTERM to the ranks
// and kills them a second later; or SIGTERM goes to rank 1 alone, and
// rank 0 must stop at the same step.
func TestSignalResumeIsExact(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	bin, config := buildWeft(t), tinyConfig(t)
	mpirun, _ := exec.LookPath("mpirun")
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d", seed)
	for _, ranks := range []int{1, 2} {
		for _, spec := range []string{"16-mixed", "bf16-mixed+fp8"} {
			t.Run(fmt.Sprintf("ranks=%d/%s", ranks, spec), func(t *testing.T) {
				// mpirun forwards a signal a second late: leave the run
				// time to take it: a larger batch slows its steps.
				steps := map[int]int{1: 600, 2: 4000}[ranks]
				batch := map[int]string{1: "4", 2: "16"}[ranks]
				if ranks > 1 && mpirun == "" {
					t.Skip("mpirun not installed (apt-get install openmpi-bin libopenmpi-dev)")
				}
				command := func(out string, more ...string) *exec.Cmd {
					// No periodic save: a run of a few thousand steps a second
					// under mpirun's late signal can reach one, which would
					// pass for the stop's checkpoint.
					args := append([]string{"train", "--config", config, "--precision", spec, "--steps", fmt.Sprint(steps), "--save-every", fmt.Sprint(10 * steps), "--batch-size", batch, "--out", out}, more...)
					if ranks == 1 {
						return exec.Command(bin, args...)
					}
					args = append(args, "--strategy", "ddp", "--devices", "2", "--comm", "mpi")
					return exec.Command(mpirun, append(append(mpirunArgs(2), bin), args...)...)
				}
				straight := t.TempDir()
				if res, err := command(straight).CombinedOutput(); err != nil {
					t.Fatalf("uninterrupted run: %v\n%s", err, res)
				}
				wantMetrics, wantState := outcome(t, straight, steps)
				for cycle := range map[int]int{1: 6, 2: 4}[ranks] { // 20 in all

					out := t.TempDir()
					cmd := command(out)
					log, done := startLogged(t, cmd)
					at := 1 + rng.IntN(steps/10)
					waitForSteps(t, out, at, done)
					sig := []syscall.Signal{syscall.SIGINT, syscall.SIGTERM}[cycle%2]
					target, ok := cmd.Process.Pid, true
					if ranks > 1 && sig == syscall.SIGTERM {
						target, ok = rankPid(bin, "1")
					}
					if !ok {
						t.Fatal("rank 1 is not running")
					}
					if err := syscall.Kill(target, sig); err != nil {
						t.Fatal(err)
					}
					err := <-done
					var exit *exec.ExitError
					if err == nil {
						t.Fatalf("cycle %d, %v after step %d: the run ended 0, as if the signal never reached it:\n%s", cycle, sig, at, log.String())
					}
					if !errors.As(err, &exit) || ranks == 1 && exit.ExitCode() != 128+int(sig) {
						t.Fatalf("cycle %d, %v after step %d: exit %v, want %d:\n%s", cycle, sig, at, err, 128+int(sig), log.String())
					}
					// mpirun no longer forwards output once signalled.
					if n := strings.Count(log.String(), "stopped after step "); n != 1 && target != cmd.Process.Pid {
						t.Fatalf("cycle %d: %d reports of the stop, want 1:\n%s", cycle, n, log.String())
					}
					m, _, err := train.LatestCheckpoint(filepath.Join(out, "checkpoints"))
					if err != nil || m.Step < at || m.Step == steps {
						t.Fatalf("cycle %d, %v after step %d: latest checkpoint %v (%v), want the stop's:\n%s", cycle, sig, at, m, err, log.String())
					}
					if res, err := command(out, "--resume").CombinedOutput(); err != nil {
						t.Fatalf("cycle %d: resume: %v\n%s", cycle, err, res)
					}
					gotMetrics, gotState := outcome(t, out, steps)
					if gotMetrics != wantMetrics || gotState != wantState {
						t.Fatalf("cycle %d, %v after step %d: the resumed run differs from the uninterrupted one (metrics equal %v, weights equal %v)\n%s",
							cycle, sig, at, gotMetrics == wantMetrics, gotState == wantState, log.String())
					}
				}
			})
		}
	}
}

// mpiTrain starts weft train as two ranks under mpirun, logging to log.
func mpiTrain(t *testing.T, bin string, log *bytes.Buffer, args ...string) (cmd *exec.Cmd, done <-chan error) {
	t.Helper()
	mpirun, err := exec.LookPath("mpirun")
	if err != nil || testing.Short() {
		t.Skip("mpirun not installed (apt-get install openmpi-bin libopenmpi-dev) or -short")
	}
	args = append([]string{"train", "--devices", "2", "--comm", "mpi"}, args...)
	cmd = exec.Command(mpirun, append(append(mpirunArgs(2), bin), args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	go func() { ch <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, ch
}

// endsWithin requires the job to end non-zero within limit.
func endsWithin(t *testing.T, done <-chan error, limit time.Duration, log *bytes.Buffer) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("the job exited 0:\n%s", log.String())
		}
		return time.Since(start)
	case <-time.After(limit):
		t.Fatalf("the job still runs %v later:\n%s", limit, log.String())
	}
	return 0
}

// TestHungPeerUnderMpirun stops rank 1 of a two-process fsdp run with
// SIGSTOP, as a hung peer: mpirun sees nothing wrong, so weft must end the
// wait. Left alone, rank 0 fails within --comm-timeout, naming rank 1 or,
// where MPI cannot tell, the collective in flight. Given SIGTERM, rank 0
// gives up the wait after the stop's grace period (5s), long before a
// timeout of a minute; a second SIGTERM exits at once.
func TestHungPeerUnderMpirun(t *testing.T) {
	bin, config := buildWeft(t), tinyConfig(t)
	for _, tc := range []struct {
		name, timeout string
		signals       int
		limit         time.Duration
		want          []string // one of
	}{
		{"timeout", "2s", 0, 10 * time.Second, []string{"rank 1 did not join", "a peer did not join", "a peer did not finish"}},
		{"signal", "1m", 1, 15 * time.Second, []string{"(terminated, and the step in progress did not end within 5s)"}},
		{"second signal", "1m", 2, 3 * time.Second, []string{"weft: terminated again: exiting without a checkpoint"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			out := t.TempDir()
			_, done := mpiTrain(t, bin, &log, "--config", config, "--strategy", "fsdp", "--steps", "1000000", "--comm-timeout", tc.timeout, "--out", out)
			waitForSteps(t, out, 50, done)
			r0, ok0 := rankPid(bin, "0")
			r1, ok1 := rankPid(bin, "1")
			if !ok0 || !ok1 {
				t.Fatal("the ranks are not running")
			}
			if err := syscall.Kill(r1, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			for i := range tc.signals {
				time.Sleep(200 * time.Millisecond)
				if err := syscall.Kill(r0, syscall.SIGTERM); err != nil {
					t.Fatalf("signal %d: %v", i+1, err)
				}
			}
			took := endsWithin(t, done, tc.limit, &log)
			var said string
			for line := range strings.Lines(log.String()) {
				for _, w := range tc.want {
					if i := strings.Index(line, w); i >= 0 {
						said = line[max(0, strings.LastIndex(line[:i], "weft:")):]
					}
				}
			}
			if said == "" {
				t.Fatalf("no message says %q:\n%s", tc.want, log.String())
			}
			t.Logf("ended %v after the last signal: %s", took.Round(time.Millisecond), strings.TrimSpace(said))
		})
	}
}

// TestKilledFSDPRankKeepsCheckpoint kills -9 rank 1 of a two-process fsdp
// run, mid-step (checkpoints far apart) and mid-checkpoint (one every
// step): the job ends non-zero within the comm timeout, and its latest
// checkpoint resumes on one rank and on two.
func TestKilledFSDPRankKeepsCheckpoint(t *testing.T) {
	bin, config := buildWeft(t), tinyConfig(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for name, every := range map[string]string{"mid-step": "200", "mid-checkpoint": "1"} {
		t.Run(name, func(t *testing.T) {
			var log bytes.Buffer
			out := t.TempDir()
			_, done := mpiTrain(t, bin, &log, "--config", config, "--strategy", "fsdp", "--steps", "1000000", "--save-every", every, "--comm-timeout", "10s", "--out", out)
			waitForFile(t, filepath.Join(out, "checkpoints", "latest"), time.Minute)
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
			r1, ok := rankPid(bin, "1")
			if !ok {
				t.Fatal("rank 1 is not running")
			}
			if err := syscall.Kill(r1, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			endsWithin(t, done, 15*time.Second, &log)
			m, _, err := train.LatestCheckpoint(filepath.Join(out, "checkpoints"))
			if err != nil {
				t.Fatalf("no checkpoint left: %v\n%s", err, log.String())
			}
			two := t.TempDir()
			if err := os.CopyFS(two, os.DirFS(out)); err != nil {
				t.Fatal(err)
			}
			resume := []string{"--config", config, "--strategy", "fsdp", "--steps", fmt.Sprint(m.Step + 1), "--resume"}
			if res, err := exec.Command(bin, append([]string{"train", "--devices", "1", "--out", out}, resume...)...).CombinedOutput(); err != nil {
				t.Fatalf("resume on 1 rank after step %d: %v\n%s", m.Step, err, res)
			}
			var log2 bytes.Buffer
			_, done2 := mpiTrain(t, bin, &log2, append(resume, "--out", two)...)
			if err := <-done2; err != nil {
				t.Fatalf("resume on 2 ranks after step %d: %v\n%s", m.Step, err, log2.String())
			}
		})
	}
}

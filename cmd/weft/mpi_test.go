package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	mpirunjob "github.com/weftml/weft/internal/mpirun"
)

// TestParityUnderMpirun runs `weft parity --comm mpi` as two and as four
// Open MPI processes for every reference model and strategy, and requires
// the same losses, bit for bit, as as many in-process ranks (which
// TestParityStrategies holds to the single-device run).
func TestParityUnderMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil || testing.Short() {
		t.Skip("mpirun not installed (apt-get install openmpi-bin libopenmpi-dev) or -short")
	}
	bin := buildWeft(t)
	for _, n := range []int{2, 4} {
		for _, model := range []string{"mlp", "cnn", "gpt"} {
			for _, st := range []string{"ddp", "zero1", "zero2", "fsdp"} {
				t.Run(fmt.Sprintf("%s/%s/%d", model, st, n), func(t *testing.T) {
					mpiMatchesLocal(t, mpirun, bin, n, []string{"parity", "--model", model, "--precision", "64-true", "--strategy", st, "--devices", strconv.Itoa(n), "--json", "--refs", "../../testdata/reference"})
				})
			}
		}
	}
}

// mpiMatchesLocal runs weft with args as n Open MPI processes and as n
// in-process ranks and requires the same losses, bit for bit.
func mpiMatchesLocal(t *testing.T, mpirun, bin string, n int, args []string) {
	t.Helper()
	job := append(append(mpirunArgs(n), bin), append(args, "--comm", "mpi")...)
	mpiOut, err := mpirunjob.Retry(func() ([]byte, error) { return exec.Command(mpirun, job...).CombinedOutput() }) // a fresh command each attempt
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, mpiOut)
	}
	localOut, code := run(append(args, "--comm", "local")...)
	if code != 0 {
		t.Fatalf("local: %s", localOut)
	}
	sameLosses(t, string(mpiOut), localOut)
}

// TestTensorParallelUnderMpirun runs tensor-parallel parity replays as
// Open MPI processes, the mesh's rows and columns split with
// MPI_Comm_split, and requires the losses of as many in-process ranks, bit
// for bit (TestParityTensorParallel holds those to one device).
func TestTensorParallelUnderMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil || testing.Short() {
		t.Skip("mpirun not installed (apt-get install openmpi-bin libopenmpi-dev) or -short")
	}
	bin := buildWeft(t)
	for _, tc := range []struct {
		devices int
		args    string
	}{
		{2, "--model gpt --tp 2 --strategy single"},
		{4, "--model gpt --tp 2 --strategy ddp"},
		{4, "--model gpt --tp 2 --strategy zero1"},
		{4, "--model gpt --tp 2 --strategy zero2"},
		{4, "--model gpt --tp 2 --strategy fsdp"},
		{2, "--model gpt --tp 2 --sequence-parallel --strategy single"},
		{4, "--model gpt --tp 2 --sequence-parallel --strategy fsdp"},
		{4, "--gpt 2,32,8,8 --tp 4 --strategy single"},
	} {
		t.Run(strconv.Itoa(tc.devices)+"/"+strings.ReplaceAll(tc.args, " ", ""), func(t *testing.T) {
			args := append(append([]string{"parity"}, strings.Fields(tc.args)...), "--precision", "64-true", "--devices", strconv.Itoa(tc.devices), "--json", "--refs", "../../testdata/reference")
			mpiMatchesLocal(t, mpirun, bin, tc.devices, args)
		})
	}
}

// sameLosses requires the JSON results in two outputs to hold identical losses.
func sameLosses(t *testing.T, mpiOut, localOut string) {
	losses := func(out string) []float64 {
		var r struct{ Losses []float64 }
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &r) == nil {
				return r.Losses
			}
		}
		t.Fatalf("no JSON result in:\n%s", out)
		return nil
	}
	m, l := losses(mpiOut), losses(localOut)
	if len(m) != len(l) || len(m) == 0 {
		t.Fatalf("%d losses under mpirun, %d local", len(m), len(l))
	}
	for i := range m {
		if m[i] != l[i] {
			t.Fatalf("step %d: mpi %v, local %v", i, m[i], l[i])
		}
	}
}

// TestKilledRankUnderMpirun kills rank 1 of a two-process training run:
// the job must end non-zero within 30 s, naming the lost rank.
func TestKilledRankUnderMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil || testing.Short() {
		t.Skip("mpirun not installed (apt-get install openmpi-bin libopenmpi-dev) or -short")
	}
	bin := buildWeft(t)
	args := append(mpirunArgs(2), bin, "train", "--strategy", "ddp", "--devices", "2", "--comm", "mpi", "--steps", "100000", "--out", t.TempDir())
	cmd := exec.Command(mpirun, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	victim := waitForRank(t, bin, "1", 60*time.Second)
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("the job exited 0 after rank 1 was killed:\n%s", out.String())
		}
		if !strings.Contains(out.String(), "rank 1") {
			t.Errorf("no message names rank 1:\n%s", out.String())
		}
		t.Logf("ended %v after the kill: %v", time.Since(killed).Round(time.Millisecond), err)
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("still running 30 s after rank 1 was killed:\n%s", out.String())
	}
}

// waitForRank returns the pid of the process running bin as Open MPI rank
// rank, once it has started training (its loss shows in the output soon).
func waitForRank(t *testing.T, bin, rank string, limit time.Duration) int {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if pid, ok := rankPid(bin, rank); ok {
			time.Sleep(3 * time.Second) // let it get into training
			return pid
		}
	}
	t.Fatalf("rank %s of %s never started", rank, bin)
	return 0
}

// rankPid returns the pid of the process running bin as Open MPI rank rank.
func rankPid(bin, rank string) (int, bool) {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		exe, err := os.Readlink(filepath.Join(p, "exe"))
		if err != nil || exe != bin {
			continue
		}
		env, _ := os.ReadFile(filepath.Join(p, "environ"))
		if strings.Contains("\x00"+string(env), "\x00OMPI_COMM_WORLD_RANK="+rank+"\x00") {
			pid, _ := strconv.Atoi(filepath.Base(p))
			return pid, true
		}
	}
	return 0, false
}

// buildWeft builds the weft command for tests that run it as a process.
func buildWeft(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "weft")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestTrainUnderMpirun trains a subset of the product matrix (see
// train's TestProductMatrix) as two Open MPI processes and requires what
// two in-process ranks give: the same losses and final weights, bit for bit.
func TestTrainUnderMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil || testing.Short() {
		t.Skip("mpirun not installed (apt-get install openmpi-bin libopenmpi-dev) or -short")
	}
	bin := buildWeft(t)
	config := filepath.Join(t.TempDir(), "tiny.yaml")
	tiny := "model: {gpt: {layers: 1, width: 16, heads: 2, context: 8}}\ndata: {corpus_bytes: 262144, batch_size: 4}\neval: {batches: 1, every: 1000}\ncheckpoint: {save_every: 1000}\noptim: {steps: 3}\n"
	if err := os.WriteFile(config, []byte(tiny), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"te-fsdp":        {"--precision", "transformer-engine", "--strategy", "fsdp"},
		"16mixed-ddp":    {"--precision", "16-mixed", "--strategy", "ddp"},
		"hybrid-ddp":     {"--model", "hybrid", "--precision", "bf16-true", "--precision-for", "vision.**=16-mixed", "--strategy", "ddp"},
		"cnn-bf16-zero2": {"--model", "cnn", "--precision", "bf16-true", "--strategy", "zero2"},
		"nf4-fsdp":       {"--precision", "bf16-true+nf4-dq", "--strategy", "fsdp"},
		"te-tp2":         {"--precision", "transformer-engine", "--strategy", "single", "--tp", "2"},
		"te-tp2-seq":     {"--precision", "transformer-engine", "--strategy", "single", "--tp", "2", "--sequence-parallel"},
	} {
		t.Run(name, func(t *testing.T) {
			train := func(comm string) (losses string, state []byte) {
				out := filepath.Join(t.TempDir(), comm)
				cmd := append([]string{"train", "--config", config, "--devices", "2", "--comm", comm, "--out", out}, args...)
				if comm == "mpi" {
					cmd = append(append(mpirunArgs(2), bin), cmd...)
				}
				name := map[string]string{"mpi": mpirun, "local": bin}[comm]
				b, err := mpirunjob.Retry(func() ([]byte, error) {
					os.RemoveAll(out) // a retried job starts afresh
					return exec.Command(name, cmd...).CombinedOutput()
				})
				if err != nil {
					t.Fatalf("%s: %v\n%s", comm, err, b)
				}
				// Rank 0 alone reports, with the first validation loss it read.
				if summaries := strings.Count(string(b), "validation loss"); summaries != 1 || strings.Contains(string(b), "NaN") {
					t.Fatalf("%s: %d summaries:\n%s", comm, summaries, b)
				}
				// mpirun hands each rank a terminal: ranks must print lines, not redrawn bars.
				if strings.Contains(string(b), "\r") {
					t.Fatalf("%s: a progress bar in a redirected log:\n%q", comm, b)
				}
				metrics, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
				if err != nil {
					t.Fatal(err)
				}
				if state, err = os.ReadFile(filepath.Join(out, "checkpoints", "step-000003", "state.safetensors")); err != nil {
					t.Fatal(err)
				}
				for _, line := range strings.Split(strings.TrimSpace(string(metrics)), "\n") {
					var m struct{ Loss, ValLoss *float64 }
					if err := json.Unmarshal([]byte(line), &m); err != nil || m.Loss == nil {
						t.Fatalf("%s: metrics line %q: %v", comm, line, err)
					}
					losses += strconv.FormatFloat(*m.Loss, 'g', -1, 64) + " "
				}
				return losses, state
			}
			mpiLosses, mpiState := train("mpi")
			localLosses, localState := train("local")
			if mpiLosses != localLosses || string(mpiState) != string(localState) {
				t.Fatalf("mpirun: losses %s; in-process: %s (final weights equal: %v)", mpiLosses, localLosses, string(mpiState) == string(localState))
			}
		})
	}
}

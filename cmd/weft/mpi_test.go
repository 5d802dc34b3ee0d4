package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestParityUnderMpirun runs `weft parity --comm mpi` as two Open MPI
// processes for every reference model and strategy, and requires the same
// losses, bit for bit, as two in-process ranks.
func TestParityUnderMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil || testing.Short() {
		t.Skip("mpirun not installed (apt-get install openmpi-bin libopenmpi-dev) or -short")
	}
	bin := filepath.Join(t.TempDir(), "weft")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	mpiArgs := []string{"--oversubscribe", "-np", "2"}
	if os.Geteuid() == 0 {
		mpiArgs = append(mpiArgs, "--allow-run-as-root")
	}
	for _, model := range []string{"mlp", "cnn", "gpt"} {
		for _, st := range []string{"ddp", "zero1", "zero2", "fsdp"} {
			t.Run(model+"/"+st, func(t *testing.T) {
				args := []string{"parity", "--model", model, "--precision", "64-true", "--strategy", st, "--devices", "2", "--json", "--refs", "../../testdata/reference"}
				mpiOut, err := exec.Command(mpirun, append(append(mpiArgs, bin), append(args, "--comm", "mpi")...)...).CombinedOutput()
				if err != nil {
					t.Fatalf("mpirun: %v\n%s", err, mpiOut)
				}
				localOut, code := run(append(args, "--comm", "local")...)
				if code != 0 {
					t.Fatalf("local: %s", localOut)
				}
				sameLosses(t, string(mpiOut), localOut)
			})
		}
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

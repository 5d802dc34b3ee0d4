package main

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

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
		{4, "--model gpt --tp 2 --strategy fsdp"},
		{4, "--gpt 2,32,8,8 --tp 4 --strategy single"},
	} {
		t.Run(strconv.Itoa(tc.devices)+"/"+strings.ReplaceAll(tc.args, " ", ""), func(t *testing.T) {
			args := append(append([]string{"parity"}, strings.Fields(tc.args)...), "--precision", "64-true", "--devices", strconv.Itoa(tc.devices), "--json", "--refs", "../../testdata/reference")
			mpiOut, err := exec.Command(mpirun, append(append(mpirunArgs(tc.devices), bin), append(args, "--comm", "mpi")...)...).CombinedOutput()
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

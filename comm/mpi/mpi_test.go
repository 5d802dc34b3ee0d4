package mpi_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/commtest"
	"github.com/weftml/weft/comm/mpi"
	mpirunjob "github.com/weftml/weft/internal/mpirun"
)

// worldSize is the number of processes mpirun started, or 0 when the test
// was not launched by mpirun.
var worldSize, _ = strconv.Atoi(os.Getenv("OMPI_COMM_WORLD_SIZE"))

// TestMain keeps a communicator open for the whole run under mpirun:
// closing the last one finalizes MPI, which cannot start again.
func TestMain(m *testing.M) {
	if worldSize == 0 {
		os.Exit(m.Run())
	}
	keep, err := mpi.New(mpi.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := keep.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

func needMpirun(tb testing.TB) {
	if worldSize == 0 {
		tb.Skip("not launched by mpirun (OMPI_COMM_WORLD_SIZE is unset); TestMPIUnderMpirun launches it")
	}
}

// TestConformance runs the suite with collectives small enough to travel
// with their notices doing so (fused), and with every one running in MPI
// (unfused).
func TestConformance(t *testing.T) {
	needMpirun(t)
	for _, mode := range []struct {
		name string
		fuse int
	}{{"fused", 0}, {"unfused", -1}} { // in the same order on every rank
		t.Run(mode.name, func(t *testing.T) {
			commtest.Run(t, func(n int) []comm.Communicator {
				if n != worldSize {
					return nil
				}
				c, err := mpi.New(mpi.Options{Timeout: time.Second, Fuse: mode.fuse})
				if err != nil {
					t.Error(err)
					return nil
				}
				return []comm.Communicator{c}
			})
		})
	}
}

// TestMPIUnderMpirun runs this test binary's MPI tests as two ranks under
// mpirun, when it was not launched that way itself: the conformance suite,
// its sub-communicator tests again on four ranks (a 2×2 mesh), then
// TestAbandon both ways, each of which must end its job non-zero.
func TestMPIUnderMpirun(t *testing.T) {
	if worldSize != 0 {
		t.Skip("already running under mpirun")
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found: install openmpi-bin libopenmpi-dev")
	}
	if testing.Short() {
		t.Skip("starts MPI jobs")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	job := func(np int, args ...string) (string, error) {
		args = append([]string{"--oversubscribe", "-np", strconv.Itoa(np), self}, args...)
		if os.Geteuid() == 0 {
			args = append([]string{"--allow-run-as-root"}, args...)
		}
		out, err := mpirunjob.Retry(func() ([]byte, error) { return exec.CommandContext(t.Context(), mpirun, args...).CombinedOutput() })
		return fmt.Sprintf("mpirun %s: %v\n%s", strings.Join(args, " "), err, out), err
	}

	out, err := job(2, "-test.run=^TestConformance$", "-test.v")
	if n := strings.Count(out, "--- PASS: TestConformance "); err != nil || n != 2 {
		t.Errorf("%d of 2 ranks passed: %s", n, out)
	}
	out, err = job(4, "-test.run=^TestConformance$/^(fused|unfused)$/^plain$/^ranks=4$/^(Split|Mesh)$", "-test.v")
	if n := strings.Count(out, "/plain/ranks=4/Mesh "); err != nil || n != 8 {
		t.Errorf("%d of 4 ranks × 2 passed the mesh tests: %s", n, out)
	}
	// Given up on time: at the deadline, or within a second after it on a busy machine.
	for how, want := range map[string]*regexp.Regexp{
		"timeout": regexp.MustCompile(`abandoned after (0\.[5-9]|1\.[0-5])s: a peer did not finish allreduce within 500ms`),
		"cancel":  regexp.MustCompile(`abandoned after (0\.[3-9]|1\.[0-3])s: mpi: rank 0: gave up on allreduce of 65540 bytes \(sum float32\) in flight: context deadline exceeded`),
	} {
		out, err = job(2, "-test.run=^TestAbandon$", "-mpi.abandon="+how)
		if err == nil || !want.MatchString(out) {
			t.Errorf("%s: want a failed job and rank 0 saying %q: %s", how, want, out)
		}
	}
}

func TestRegistered(t *testing.T) {
	needMpirun(t)
	comms, err := comm.Open("mpi", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	if len(comms) != 1 || comms[0].Size() != worldSize {
		t.Errorf("Open(mpi, 0) = %d communicators of %d ranks, want 1 of %d", len(comms), comms[0].Size(), worldSize)
	}
}

// BenchmarkAllReduce64MiB runs under mpirun with a fixed iteration count,
// which every rank must share:
//
//	mpirun -np 2 ./mpi.test -test.run=^$ -test.bench=AllReduce64MiB -test.benchtime=5x
func BenchmarkAllReduce64MiB(b *testing.B) {
	needMpirun(b)
	if !strings.HasSuffix(flag.Lookup("test.benchtime").Value.String(), "x") {
		b.Skip("needs -test.benchtime=Nx, so that every rank runs the same iterations")
	}
	c, err := mpi.New(mpi.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	commtest.BenchmarkAllReduce(b, []comm.Communicator{c}, 64<<20)
}

package mpi

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/internal/call"
	"github.com/weftml/weft/dtype"
)

func TestLoadMissingLibrary(t *testing.T) {
	_, err := load("/nonexistent/libmpi.so")
	if err == nil || !strings.Contains(err.Error(), "Open MPI not found: install openmpi-bin libopenmpi-dev") {
		t.Errorf("got %v, want an error saying how to install Open MPI", err)
	}
}

var watchdog = flag.Bool("mpi.watchdog", false, "run TestWatchdog, in an MPI job of its own")

// TestWatchdog has rank 1 send its notice and then never make the call,
// as if it died mid-collective. Rank 0 must fail with a PeerError and
// then, MPI being stuck, exit non-zero: it prints the error and exits 3,
// which ends the job. TestMPIUnderMpirun runs it and checks the output.
func TestWatchdog(t *testing.T) {
	if !*watchdog {
		t.Skip("needs -mpi.watchdog, in an MPI job of its own: it leaves MPI stuck")
	}
	c, err := newConn(state.lib, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if c.rank != 0 {
		if err := c.arrive(ctx, call.Call{Collective: comm.AllReduce, DType: dtype.F32, Op: comm.Sum, Bytes: 4}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute) // until mpirun ends the job
	}
	err = c.AllReduce(ctx, make([]byte, 4), dtype.F32, comm.Sum)
	var pe *comm.PeerError
	if !errors.As(err, &pe) || !c.stuck {
		t.Fatalf("got %v, stuck %v; want a PeerError and stuck", err, c.stuck)
	}
	fmt.Println("watchdog:", err)
	os.Exit(3)
}

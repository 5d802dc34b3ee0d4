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

// unfused is a buffer too large to travel with the notices: its
// collective runs in MPI.
const unfused = fuseBytes + 4

var abandon = flag.String("mpi.abandon", "", "run TestAbandon, in an MPI job of its own (it leaves MPI stuck): timeout or cancel")

// TestAbandon has rank 1 send its notice and then never make the call,
// as if it died mid-collective. Rank 0 must give up on the collective in
// flight: with a PeerError when the timeout (500ms) passes, or when its
// context is canceled (after 300ms, with a timeout of a minute). MPI being
// stuck, it then prints the error and exits 3, which ends the job.
// TestMPIUnderMpirun runs it both ways and checks the output.
func TestAbandon(t *testing.T) {
	if *abandon == "" {
		t.Skip("needs -mpi.abandon, in an MPI job of its own: it leaves MPI stuck")
	}
	timeout := map[string]time.Duration{"timeout": 500 * time.Millisecond, "cancel": time.Minute}[*abandon]
	c, err := worldConn(state.lib, timeout, fuseBytes)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if *abandon == "timeout" {
		ctx = context.Background()
	}
	if c.rank != 0 {
		if err := c.arrive(ctx, call.Call{Collective: comm.AllReduce, DType: dtype.F32, Op: comm.Sum, Bytes: unfused}, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute) // until mpirun ends the job
	}
	start := time.Now()
	err = c.AllReduce(ctx, make([]byte, unfused), dtype.F32, comm.Sum)
	if err == nil || !c.stuck || !errors.Is(c.AllReduce(context.Background(), make([]byte, unfused), dtype.F32, comm.Sum), err) {
		t.Fatalf("got %v, stuck %v; want an error, stuck, and the next call failing alike", err, c.stuck)
	}
	fmt.Printf("abandoned after %.1fs: %v\n", time.Since(start).Seconds(), err)
	os.Exit(3)
}

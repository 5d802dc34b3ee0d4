package local_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/commtest"
	"github.com/weftml/weft/comm/local"
	"github.com/weftml/weft/dtype"
)

func TestConformance(t *testing.T) {
	commtest.Run(t, func(n int) []comm.Communicator {
		return local.NewGroup(n, local.Options{Timeout: 500 * time.Millisecond})
	})
}

// each runs f on every rank of comms concurrently and returns their errors.
func each(comms []comm.Communicator, f func(c comm.Communicator) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Go(func() { errs[i] = f(c) })
	}
	wg.Wait()
	return errs
}

func TestMismatchedCallsFailEveryRank(t *testing.T) {
	comms := local.NewGroup(2, local.Options{Timeout: 10 * time.Second})
	errs := each(comms, func(c comm.Communicator) error {
		if c.Rank() == 0 {
			return c.AllReduce(context.Background(), make([]byte, 8), dtype.F32, comm.Sum)
		}
		return c.AllGather(context.Background(), make([]byte, 8), make([]byte, 16))
	})
	for rank, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "ranks disagree") {
			t.Errorf("rank %d: got %v, want an error saying the ranks disagree", rank, err)
		}
	}
}

func TestClosedPeerFailsWaitersAtOnce(t *testing.T) {
	comms := local.NewGroup(3, local.Options{Timeout: time.Minute})
	start := time.Now()
	errs := each(comms, func(c comm.Communicator) error {
		if c.Rank() == 1 {
			time.Sleep(10 * time.Millisecond)
			return c.Close()
		}
		return c.Barrier(context.Background())
	})
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("waiters returned after %v, not at once", elapsed)
	}
	for _, rank := range []int{0, 2} {
		var pe *comm.PeerError
		if !errors.As(errs[rank], &pe) || pe.Error() != "rank 1 closed its communicator" {
			t.Errorf("rank %d: got %v, want rank 1 closed its communicator", rank, errs[rank])
		}
	}
}

func TestTimeoutNamesMissingRanksWithinTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	comms := local.NewGroup(4, local.Options{Timeout: timeout})
	start := time.Now()
	errs := each(comms[:2], func(c comm.Communicator) error {
		return c.AllReduce(context.Background(), make([]byte, 4), dtype.BF16, comm.Sum)
	})
	if elapsed := time.Since(start); elapsed < timeout || elapsed > 5*timeout {
		t.Errorf("ranks returned after %v, want about %v", elapsed, timeout)
	}
	want := "comm: allreduce: ranks 2, 3 did not join allreduce within 200ms"
	for rank, err := range errs {
		if err == nil || err.Error() != want {
			t.Errorf("rank %d: got %v, want %q", rank, err, want)
		}
	}
	// The group stays broken: a late rank fails at once with the same cause.
	err := comms[2].Barrier(context.Background())
	if err == nil || !strings.HasSuffix(err.Error(), "ranks 2, 3 did not join allreduce within 200ms") {
		t.Errorf("late rank: got %v", err)
	}
}

func TestRegistered(t *testing.T) {
	comms, err := comm.Open("local", 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(comms) != 3 || comms[2].Rank() != 2 || comms[2].Size() != 3 {
		t.Errorf("Open(local, 3) = %d communicators", len(comms))
	}
	if _, err := comm.Open("local", 0, 0); err == nil {
		t.Error("Open(local, 0) succeeded")
	}
	// The timeout given to Open bounds the wait for a missing peer.
	comms, err = comm.Open("local", 2, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := comms[0].Barrier(context.Background()); err == nil || !strings.HasSuffix(err.Error(), "rank 1 did not join barrier within 50ms") {
		t.Errorf("Open(local, 2, 50ms): a barrier without rank 1 gave %v", err)
	}
}

func BenchmarkAllReduce64MiB(b *testing.B) {
	for _, n := range []int{2, 4} {
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) {
			commtest.BenchmarkAllReduce(b, local.NewGroup(n, local.Options{}), 64<<20)
		})
	}
}

// Each rank of an in-process group runs on its own goroutine.
func ExampleNewGroup() {
	comms := local.NewGroup(2, local.Options{})
	grads := [][]float32{{1, 2}, {10, 20}}
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			buf := make([]byte, 8)
			dtype.Encode(dtype.F32, buf, grads[r], false)
			if err := c.AllReduce(context.Background(), buf, dtype.F32, comm.Sum); err != nil {
				panic(err)
			}
			dtype.Decode(dtype.F32, grads[r], buf)
		})
	}
	wg.Wait()
	fmt.Println(grads)
	// Output: [[11 22] [11 22]]
}

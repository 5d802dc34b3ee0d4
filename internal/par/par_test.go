package par

import (
	"sync/atomic"
	"testing"
	"time"
)

// signal is a job that records it ran and then waits for release.
type signal struct {
	started chan bool
	release chan bool
}

func (s signal) Do() {
	s.started <- true
	<-s.release
}

// TestHelpersTakeJobsWhileTheCallerWaits queues jobs the caller never
// runs: each must start on a helper, the second one right after the first
// (the helper polls for it, or wakes), and both while the caller blocks.
func TestHelpersTakeJobsWhileTheCallerWaits(t *testing.T) {
	jobs := Hire(1)
	for range 2 {
		s := signal{started: make(chan bool), release: make(chan bool)}
		jobs <- s
		select {
		case <-s.started:
		case <-time.After(10 * time.Second):
			t.Fatal("no helper took the job")
		}
		close(s.release)
	}
}

type count struct{ n *atomic.Int32 }

func (c count) Do() { c.n.Add(1) }

// TestDrainRunsWhatIsQueued fills the queue faster than a helper could
// take it all and requires Drain to leave it empty, and Drain plus the
// helpers to run every job once.
func TestDrainRunsWhatIsQueued(t *testing.T) {
	jobs := Hire(1)
	var n atomic.Int32
	for range 32 {
		jobs <- count{&n}
	}
	Drain(jobs)
	if len(jobs) != 0 {
		t.Errorf("Drain left %d jobs queued", len(jobs))
	}
	for deadline := time.Now().Add(10 * time.Second); n.Load() < 32 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if got := n.Load(); got != 32 {
		t.Errorf("%d of 32 jobs ran", got)
	}
}

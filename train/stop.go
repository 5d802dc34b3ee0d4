package train

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// minGrace is the least time a stop request leaves the step in progress
// to reach its boundary before the collectives' waits are given up.
const minGrace = 5 * time.Second

// A StoppedError is what Run returns when its context was done (SIGINT,
// SIGTERM) and the ranks stopped at a step boundary: Step steps are done
// and saved in Checkpoint, from which --resume continues.
type StoppedError struct {
	Step       int
	Checkpoint string
	Cause      error // context.Cause of Run's context
}

func (e *StoppedError) Error() string {
	return fmt.Sprintf("stopped after step %d (%v); checkpoint %s; --resume continues", e.Step, e.Cause, e.Checkpoint)
}

func (e *StoppedError) Unwrap() error { return e.Cause }

// errPeerStopped is the cause of a stop on a rank that was not asked to.
var errPeerStopped = errors.New("another rank was asked to stop")

// stopper turns a done context into a stop at a step boundary. The
// collectives do not run under ctx, which would fail the step in progress
// and leave nothing to checkpoint, but under work: done a grace period
// after ctx (twice the longest step so far, at least minGrace), so that a
// collective stuck on a hung peer still ends, unless the ranks reached a
// boundary first (settle).
type stopper struct {
	ctx, work context.Context
	longest   atomic.Int64 // the longest step so far, in nanoseconds
	settled   atomic.Bool
	release   func()
}

func newStopper(ctx context.Context) *stopper {
	work, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	s := &stopper{ctx: ctx, work: work}
	unhook := context.AfterFunc(ctx, func() {
		grace := max(minGrace, 2*time.Duration(s.longest.Load()))
		time.AfterFunc(grace, func() {
			if !s.settled.Load() {
				cancel(fmt.Errorf("%w, and the step in progress did not end within %v", context.Cause(ctx), grace))
			}
		})
	})
	s.release = func() { unhook(); cancel(nil) }
	return s
}

// took records a step's duration, which sets the grace period.
func (s *stopper) took(d time.Duration) {
	for {
		old := s.longest.Load()
		if int64(d) <= old || s.longest.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// agree reports whether the ranks stop at this boundary: whether ctx is
// done on any of them (mpirun's SIGTERM reaches processes at different
// moments, and ranks in one process look at different moments). Once they
// agree, work is no longer given up.
func (s *stopper) agree(r *rankRun) (bool, error) {
	v := 0.0
	if s.ctx.Err() != nil {
		v = 1
	}
	if r.comm.Size() > 1 {
		var err error
		if v, err = r.sum(s.work, v); err != nil {
			return false, fmt.Errorf("agreeing whether to stop: %w", err)
		}
	}
	if v > 0 {
		s.settled.Store(true)
	}
	return v > 0, nil
}

// explain adds to a run's error why its collectives were given up, if
// they were.
func (s *stopper) explain(err error) error {
	if err == nil || s.work.Err() == nil {
		return err
	}
	return fmt.Errorf("%w (%w)", err, context.Cause(s.work))
}

package strategy

import (
	"context"

	"github.com/weftml/weft/comm"
)

// link is a rank's only way to its communicator. A Communicator takes one
// call at a time, in the same order on every rank; link keeps that order
// while letting a collective run in the background (the next unit's
// gather while this one computes, a unit's gradient reduce-scatter while
// the backward goes on): each call starts once the one issued before it is
// done, on a goroutine of its own.
type link struct {
	c    comm.Communicator
	last *call // the most recently issued call, nil before the first
}

// call is one collective (or several, run as one) in flight.
type call struct {
	done chan struct{}
	err  error
}

// start issues f, to run after every call issued before it. A call after
// a failed one fails with the same error, without running: a failed
// collective leaves the group in an unknown state.
func (l *link) start(ctx context.Context, f func(ctx context.Context, c comm.Communicator) error) *call {
	prev, next := l.last, &call{done: make(chan struct{})}
	l.last = next
	go func() {
		defer close(next.done)
		if prev != nil {
			<-prev.done
			if prev.err != nil {
				next.err = prev.err
				return
			}
		}
		next.err = f(ctx, l.c)
	}()
	return next
}

// do runs f after every earlier call and returns its error.
func (l *link) do(ctx context.Context, f func(ctx context.Context, c comm.Communicator) error) error {
	return l.start(ctx, f).wait()
}

// drain waits for every call issued so far and returns the first error.
func (l *link) drain() error {
	if l.last == nil {
		return nil
	}
	return l.last.wait()
}

// wait blocks until the call is done. It needs no context: the call
// itself runs under the context it was started with, and the backends
// return once that is done.
func (c *call) wait() error {
	<-c.done
	return c.err
}

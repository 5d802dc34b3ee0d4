package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// signalled is the cause of a run's context that a signal canceled.
type signalled struct{ sig syscall.Signal }

func (s *signalled) Error() string { return s.sig.String() }

// code is the exit status of a process ended by the signal, as shells
// report it: 130 for SIGINT, 143 for SIGTERM.
func (s *signalled) code() int { return 128 + int(s.sig) }

// notifyStop returns a context that the first SIGINT or SIGTERM cancels,
// with a *signalled cause, so that a run stops at its next step boundary
// with a checkpoint. A second signal exits at once, without one. release
// restores the signals' default behaviour.
func notifyStop(parent context.Context, stderr io.Writer) (ctx context.Context, release func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		first, ok := <-ch
		if !ok {
			return
		}
		cancel(&signalled{first.(syscall.Signal)})
		if second, ok := <-ch; ok {
			s := &signalled{second.(syscall.Signal)}
			fmt.Fprintf(stderr, "weft: %v again: exiting without a checkpoint\n", s)
			os.Exit(s.code())
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(ch)
		cancel(nil)
	}
}

// signalCode is the exit status of err if a signal caused it.
func signalCode(err error) (int, bool) {
	var s *signalled
	if errors.As(err, &s) {
		return s.code(), true
	}
	return 0, false
}

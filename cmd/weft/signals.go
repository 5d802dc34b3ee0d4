package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
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

// detached writes to w from a goroutine of its own and never blocks:
// mpirun stops reading its ranks' output the moment it is signalled, a
// second before it forwards SIGTERM, and a rank blocked writing its
// progress would never reach the step boundary where it stops. What w
// cannot take meanwhile (1024 writes behind) is dropped.
type detached struct {
	ch   chan []byte
	done chan struct{}
}

func detach(w io.Writer) *detached {
	d := &detached{ch: make(chan []byte, 1024), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		for b := range d.ch {
			w.Write(b)
		}
	}()
	return d
}

func (d *detached) Write(p []byte) (int, error) {
	select {
	case d.ch <- bytes.Clone(p):
	default:
	}
	return len(p), nil
}

// close waits until everything written has reached w, or for at most
// 100ms once ctx is done (w may be mpirun, no longer reading).
func (d *detached) close(ctx context.Context) {
	close(d.ch)
	select {
	case <-d.done:
	case <-ctx.Done():
		select {
		case <-d.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

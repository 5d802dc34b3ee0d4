package train

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cancelAt cancels a run's context when rank 0 reports step at, as a
// signal would, while the other ranks are elsewhere in their loop.
type cancelAt struct {
	quiet
	at     int
	cancel context.CancelCauseFunc
}

func (c cancelAt) Step(m Metrics, _ int) {
	if m.Step == c.at {
		c.cancel(errors.New("interrupt"))
	}
}

// TestStopAtStepBoundary: a run whose context is done mid-run stops at the
// next step boundary with a checkpoint of the steps done, on every rank
// alike, and resuming from it ends bit-identical to an uninterrupted run.
func TestStopAtStepBoundary(t *testing.T) {
	for _, tc := range []struct {
		spec, strategy string
		devices        int
	}{{"16-mixed", "single", 1}, {"bf16-mixed+fp8", "ddp", 2}, {"16-mixed", "fsdp", 2}} {
		t.Run(tc.spec+"/"+tc.strategy, func(t *testing.T) {
			setup := func() Config {
				c := tinyConfig(t, tc.spec)
				c.Steps, c.Strategy, c.Devices = 12, tc.strategy, tc.devices
				return c
			}
			straight := setup()
			if _, err := Run(context.Background(), straight, false, quiet{}); err != nil {
				t.Fatal(err)
			}
			split := setup()
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			sum, err := Run(ctx, split, false, cancelAt{at: 6, cancel: cancel})
			var stopped *StoppedError
			if !errors.As(err, &stopped) || stopped.Step != 7 || sum == nil || sum.Stopped != stopped {
				t.Fatalf("got %v (summary %+v), want a stop after step 7", err, sum)
			}
			if m, _, err := LatestCheckpoint(filepath.Join(split.Out, "checkpoints")); err != nil || m.Step != 7 {
				t.Fatalf("latest checkpoint %+v, %v; want step 7", m, err)
			}
			if _, err := Run(context.Background(), split, true, quiet{}); err != nil {
				t.Fatal(err)
			}
			sameLosses(t, straight.Out, split.Out)
			final := func(c Config) string {
				b, err := os.ReadFile(filepath.Join(c.Out, "checkpoints", "step-000012", "state.safetensors"))
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
			if final(split) != final(straight) {
				t.Error("the resumed run's final weights differ from the uninterrupted run's")
			}
		})
	}
}

// hangAt makes rank 0 stop taking part at step at, as a hung peer does:
// its Step never returns until the test ends.
type hangAt struct {
	quiet
	at      int
	cancel  context.CancelCauseFunc
	release chan struct{}
}

func (h hangAt) Step(m Metrics, _ int) {
	if m.Step == h.at {
		h.cancel(errors.New("interrupt"))
		<-h.release
	}
}

// TestStopGivesUpStuckCollective: when a peer hangs, a stop request ends
// the survivors' wait in their collective after the grace period, long
// before the communicator's timeout, saying why.
func TestStopGivesUpStuckCollective(t *testing.T) {
	c := tinyConfig(t, "32-true")
	c.Strategy, c.Devices, c.CommTimeout = "ddp", 2, time.Hour
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	h := hangAt{at: 2, cancel: cancel, release: make(chan struct{})}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := Run(ctx, c, false, h)
		done <- err
	}()
	// Rank 1 waits in the stop agreement for rank 0, which never comes;
	// rank 0 is let go once rank 1 has given up, so that Run can return.
	time.Sleep(minGrace + 2*time.Second)
	close(h.release)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "interrupt, and the step in progress did not end within 5s") {
			t.Fatalf("got %v, want the wait given up after the grace period", err)
		}
		t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(time.Minute):
		t.Fatal("the run still waits a minute after the stop request")
	}
}

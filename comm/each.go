package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"sync"

	"github.com/weftml/weft/dtype"
)

// Each runs fn for every communicator this process holds (all ranks of an
// in-process group, one rank under mpirun), each on its own goroutine, and
// closes each communicator when its fn returns. It returns the cause of a
// failure once: the first error in rank order that is not a peer's
// failure seen from another rank (a PeerError or ErrClosed), else the
// first error. Ranks that fail alike (a non-finite loss all of them see)
// report it once, as rank 0 does.
func Each(comms []Communicator, fn func(i int, c Communicator) error) error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			errs[i] = fn(i, c)
		}()
	}
	wg.Wait()
	var first error
	for _, err := range errs {
		var peer *PeerError
		switch {
		case err == nil:
		case !errors.As(err, &peer) && !errors.Is(err, ErrClosed):
			return err
		case first == nil:
			first = err
		}
	}
	return first
}

// SumFloat64 returns the sum of v over c's ranks (a loss, a squared norm).
func SumFloat64(ctx context.Context, c Communicator, v float64) (float64, error) {
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], math.Float64bits(v))
	if err := c.AllReduce(ctx, buf[:], dtype.F64, Sum); err != nil {
		return 0, err
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(buf[:])), nil
}

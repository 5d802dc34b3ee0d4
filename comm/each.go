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
// closes each communicator when its fn returns. It returns the ranks'
// errors joined.
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
	return errors.Join(errs...)
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

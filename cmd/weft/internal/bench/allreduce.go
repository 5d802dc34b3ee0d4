package bench

import (
	"context"
	"time"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
)

// AllReduceResult is the measured bandwidth of one backend.
type AllReduceResult struct {
	Backend string  `json:"backend"`
	Ranks   int     `json:"ranks"`
	Bytes   int     `json:"bytes"`
	GBPerS  float64 `json:"gb_per_s"` // buffer bytes reduced per second per rank
}

// AllReduce times float32 all-reduces of nbytes over this process's
// communicators (all ranks of a local group, or this rank of an mpi job),
// reps times after one warm-up.
func AllReduce(backend string, ranks, nbytes, reps int) (AllReduceResult, error) {
	comms, err := comm.Open(backend, ranks, 0)
	if err != nil {
		return AllReduceResult{}, err
	}
	size := comms[0].Size()
	var elapsed time.Duration
	err = comm.Each(comms, func(i int, c comm.Communicator) error {
		buf := make([]byte, nbytes)
		var start time.Time
		for rep := range reps + 1 {
			if rep == 1 {
				start = time.Now()
			}
			if err := c.AllReduce(context.Background(), buf, dtype.F32, comm.Sum); err != nil {
				return err
			}
		}
		if i == 0 {
			elapsed = time.Since(start)
		}
		return nil
	})
	if err != nil {
		return AllReduceResult{}, err
	}
	return AllReduceResult{Backend: backend, Ranks: size, Bytes: nbytes, GBPerS: float64(nbytes) * float64(reps) / elapsed.Seconds() / 1e9}, nil
}

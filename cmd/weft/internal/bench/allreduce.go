package bench

import (
	"context"
	"time"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/dtype"
)

// AllReduceResult is the measured speed of one backend at one size.
type AllReduceResult struct {
	Backend string  `json:"backend"`
	Ranks   int     `json:"ranks"`
	Bytes   int     `json:"bytes"`
	Micros  float64 `json:"us"`       // mean time of one all-reduce
	GBPerS  float64 `json:"gb_per_s"` // buffer bytes reduced per second per rank
}

// AllReduceSizes are the sizes `weft bench allreduce` measures: 4 KiB to
// 64 MiB, ×4 (bench/allreduce.c measures the same).
var AllReduceSizes = []int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}

// AllReduce times float32 all-reduces of each of sizes over this
// process's communicators (all ranks of a local group, or this rank of an
// mpi job): one warm-up, then the mean over repetitions, as many as take
// about 0.2 s at 1 GB/s and at least 5.
func AllReduce(backend string, ranks int, sizes []int) ([]AllReduceResult, error) {
	comms, err := comm.Open(backend, ranks, 0)
	if err != nil {
		return nil, err
	}
	out := make([]AllReduceResult, len(sizes))
	err = comm.Each(comms, func(i int, c comm.Communicator) error {
		for s, nbytes := range sizes {
			reps := min(max(200_000_000/nbytes, 5), 2000)
			elapsed, err := timeAllReduce(c, nbytes, reps)
			if err != nil {
				return err
			}
			if i == 0 {
				out[s] = AllReduceResult{Backend: backend, Ranks: c.Size(), Bytes: nbytes, Micros: elapsed.Seconds() * 1e6 / float64(reps),
					GBPerS: float64(nbytes) * float64(reps) / elapsed.Seconds() / 1e9}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// timeAllReduce times reps all-reduces of nbytes on c after one warm-up.
func timeAllReduce(c comm.Communicator, nbytes, reps int) (time.Duration, error) {
	buf := make([]byte, nbytes)
	if err := c.AllReduce(context.Background(), buf, dtype.F32, comm.Sum); err != nil {
		return 0, err
	}
	start := time.Now()
	for range reps {
		if err := c.AllReduce(context.Background(), buf, dtype.F32, comm.Sum); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

package train

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/internal/proc"
)

// ProcessMemory is what one process of a run used at most: under mpirun
// one rank's, with in-process ranks all of them together.
type ProcessMemory struct {
	Rank int // the process's first rank
	// PeakAlloc is the allocator's high-water mark over the steps
	// (tensor.Memory's Peak), PeakRSS the kernel's (VmHWM; 0 where the
	// system does not say).
	PeakAlloc, PeakRSS int64
	// PredictedAlloc is the plan's PeakAlloc (fabric.Plan.Peak): its
	// rank's, or with in-process ranks the process's (fabric.Peak.Process),
	// and PredictedMost the most it may be where in-process ranks'
	// transients coincide (fabric.Peak.ProcessMost; else PredictedAlloc).
	PredictedAlloc, PredictedMost int64
}

// gatherMemory collects every rank's (peak alloc, peak RSS) on every rank
// and keeps one entry per process: all ranks under mpi, rank 0 alone for
// in-process ranks, which share the process and its counters, with the
// plan's predicted peak of each.
func gatherMemory(ctx context.Context, c comm.Communicator, perProcess bool, alloc int64, predicted *fabric.Peak) ([]ProcessMemory, error) {
	mine := make([]byte, 16)
	binary.LittleEndian.PutUint64(mine, uint64(alloc))
	binary.LittleEndian.PutUint64(mine[8:], uint64(proc.PeakRSS()))
	all := make([]byte, 16*c.Size())
	if err := c.AllGather(ctx, mine, all); err != nil {
		return nil, fmt.Errorf("gathering memory peaks: %w", err)
	}
	n, want, most := 1, predicted.Process, predicted.ProcessMost
	if perProcess {
		n, want, most = c.Size(), predicted.Bytes, predicted.Bytes
	}
	out := make([]ProcessMemory, n)
	for r := range out {
		out[r] = ProcessMemory{Rank: r, PeakAlloc: int64(binary.LittleEndian.Uint64(all[16*r:])), PeakRSS: int64(binary.LittleEndian.Uint64(all[16*r+8:])), PredictedAlloc: want, PredictedMost: most}
	}
	return out, nil
}

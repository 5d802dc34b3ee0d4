package train

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/internal/proc"
)

// memoryChecks are the values of Config.MemoryCheck.
var memoryChecks = []string{"on", "off"}

// admission is what a rank of the run can have and what it needs besides
// its tensors, in bytes.
type admission struct {
	budget proc.Budget
	// node is the ranks that share the budget: the node's processes'
	// ranks. floor is the process's resident memory before its tensors,
	// shared by its ranks.
	node, process int
	floor         int64
}

// perRank is the memory a rank can have for its tensors.
func (a admission) perRank() int64 {
	return a.budget.Bytes/int64(a.node) - a.floor/int64(a.process)
}

// admit refuses, before anything is allocated, a run whose plan's
// predicted peak per rank does not fit in the memory a rank can have
// beside the process's floor, saying in one line what would fit. Memory
// the system does not report admits the run.
func (s *setup) admit(p *fabric.Plan) error {
	if s.c.MemoryCheck == "off" || p.Peak == nil {
		return nil
	}
	budget, ok := proc.MemoryBudget()
	if !ok {
		return nil
	}
	a := admission{budget: budget, node: s.c.ranksOnNode(), process: s.c.ranksInProcess(), floor: proc.RSS()}
	if p.Peak.Bytes <= a.perRank() {
		return nil
	}
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	return fmt.Errorf("memory: the run needs about %.0f MiB a rank (its plan's peak %.0f MiB and %.0f MiB of the process), more than the %.0f MiB a rank can have (%s, %.0f MiB, over %d rank(s) here); %s; --memory-check off runs it anyway",
		mib(p.Peak.Bytes+a.floor/int64(a.process)), mib(p.Peak.Bytes), mib(a.floor/int64(a.process)),
		mib(a.budget.Bytes/int64(a.node)), budget.Source, mib(budget.Bytes), a.node, s.whatFits(a))
}

// whatFits lists the changes to the run whose plans fit a: the largest
// batch size, fsdp on the fewest ranks each with a machine like this
// one, activation checkpointing of the blocks.
func (s *setup) whatFits(a admission) string {
	var fits []string
	if b, ok := s.largestBatch(a.perRank()); ok {
		fits = append(fits, fmt.Sprintf("--batch-size %d", b))
	}
	if n, ok := s.fsdpRanks(a.budget.Bytes - a.floor); ok {
		fits = append(fits, fmt.Sprintf("--strategy fsdp --devices %d, each rank on a machine like this one", n*max(s.c.TP, 1)))
	}
	if s.c.Model == "gpt" || s.c.Model == "llama" {
		c := s.c
		c.ActivationCheckpointing = []string{"blocks.*"}
		if s.fits(c, a.perRank()) {
			fits = append(fits, "--activation-checkpointing 'blocks.*'")
		}
	}
	if len(fits) == 0 {
		return fmt.Sprintf("not even a batch of %d fits", s.batchUnit())
	}
	return "what fits: " + strings.Join(fits, "; or ")
}

// fits reports whether c's plan predicts a peak per rank of at most room.
func (s *setup) fits(c Config, room int64) bool {
	p, err := s.planOf(c)
	return err == nil && p.Peak.Bytes <= room
}

// batchUnit is the step the batch size goes in: every micro-batch of
// every data-parallel rank gets the same rows.
func (s *setup) batchUnit() int { return s.c.dataRanks() * max(s.c.GradAccum, 1) }

// largestBatch is the largest batch size below the run's, a multiple of
// batchUnit, whose plan fits room; the peak grows with the batch.
func (s *setup) largestBatch(room int64) (int, bool) {
	unit, c := s.batchUnit(), s.c
	lo, hi := 0, s.c.BatchSize/unit // in units: lo fits (0 trivially), hi does not
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		c.BatchSize = mid * unit
		if s.fits(c, room) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo * unit, lo > 0
}

// fsdpRanks is the fewest data-parallel ranks, up to 64, over which fsdp
// fits each rank's plan in room, the memory of a machine like this one.
func (s *setup) fsdpRanks(room int64) (int, bool) {
	if len(s.c.LoRA.Targets) > 0 { // the adapters train on one device
		return 0, false
	}
	c := s.c
	c.Strategy = "fsdp"
	for n := 2; n <= 64; n *= 2 {
		c.Devices = n * max(c.TP, 1)
		if c.BatchSize%(n*max(c.GradAccum, 1)) == 0 && s.fits(c, room) {
			return n, true
		}
	}
	return 0, false
}

// ranksInProcess is the run's ranks in this process: all of them with
// in-process ranks, one under mpirun.
func (c Config) ranksInProcess() int {
	if c.backend() == "mpi" {
		return 1
	}
	return c.Devices
}

// ranksOnNode is the run's ranks on this machine, which share its
// memory: under mpirun the launcher's count of this node's processes
// (OMPI_COMM_WORLD_LOCAL_SIZE), else this process's.
func (c Config) ranksOnNode() int {
	if c.backend() == "mpi" {
		if n, err := strconv.Atoi(os.Getenv("OMPI_COMM_WORLD_LOCAL_SIZE")); err == nil && n > 0 {
			return n
		}
	}
	return c.ranksInProcess()
}

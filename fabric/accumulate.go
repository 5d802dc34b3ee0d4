package fabric

import (
	"errors"
	"fmt"
	"strings"

	"github.com/weftml/weft/data"
)

// Accumulation is gradient accumulation: TrainStep splits each batch of B
// rows into MicroBatches batches of B/MicroBatches, runs forward and
// backward on each with its loss weighted 1/MicroBatches, and steps the
// optimizer once; in float64 that is the step one batch of B takes.
//
// The loss scaler scales every micro-batch's loss by the same scale and
// sees the accumulated gradients once, at the optimizer step (one
// inf/NaN check, one update). FP8 delayed scaling keeps Transformer
// Engine's semantics: every forward, so every micro-batch, casts with the
// current scales and enters its amaxes into the histories.
type Accumulation struct {
	// MicroBatches is how many micro-batches a step takes (4); 0 and 1
	// take the whole batch at once.
	MicroBatches int
	// Sync is when the micro-batches' gradients are reduced across ranks.
	Sync GradSync
}

// GradSync is when accumulated gradients are reduced across ranks.
type GradSync int

const (
	// SyncAuto reduces once, after the last micro-batch, where gradients
	// are whole on every rank anyway (ddp, zero1), and after every
	// micro-batch where they are sharded (zero2, fsdp), which keeps them
	// sharded.
	SyncAuto GradSync = iota
	// SyncEvery reduces every micro-batch's gradients: the reduced
	// gradients accumulate, in their sharded form under zero2 and fsdp.
	SyncEvery
	// SyncLast skips the reduction on all but the last micro-batch
	// (NoBackwardSync): least traffic; under zero2 and fsdp each rank
	// holds the whole model's unsharded gradients until then.
	SyncLast
)

var gradSyncNames = []string{"auto", "every", "last"}

func (s GradSync) String() string {
	if s < SyncAuto || s > SyncLast {
		return fmt.Sprintf("sync(%d)", int(s))
	}
	return gradSyncNames[s]
}

// UnmarshalText reads a GradSync's name: auto, every or last.
func (s *GradSync) UnmarshalText(name []byte) error {
	for i, n := range gradSyncNames {
		if n == string(name) {
			*s = GradSync(i)
			return nil
		}
	}
	return fmt.Errorf("grad sync %q: accepted are %s", name, strings.Join(gradSyncNames, ", "))
}

// NoBackwardSync runs fn, a micro-batch's backward, with the reduction of
// gradients across ranks off when skip is true (Lightning's
// no_backward_sync(model, enabled=skip)): the gradients stay on each rank,
// unreduced, and the next backward outside NoBackwardSync reduces their
// sum. On one device it only runs fn. Its memory cost under zero2 and
// fsdp is strategy.Rank.SetGradientSync's: unsharded gradients of the
// whole model on every rank. Backward sums what it is given: weight each
// micro-batch's loss by 1/K (tp.Scale) so that the sum is the batch's mean.
func (f *Fabric) NoBackwardSync(skip bool, fn func() error) error {
	if fn == nil {
		return errors.New("fabric: NoBackwardSync: the backward function is nil")
	}
	if f.dist == nil || !skip {
		return fn()
	}
	f.dist.SetGradientSync(false)
	defer f.dist.SetGradientSync(true)
	return fn()
}

// skipsSync reports whether micro-batch k of n leaves its gradients
// unreduced.
func (f *Fabric) skipsSync(k, n int) bool {
	if k == n-1 || f.dist == nil {
		return false
	}
	switch f.cfg.Accumulation.Sync {
	case SyncEvery:
		return false
	case SyncLast:
		return true
	}
	return !f.dist.Info.Sharding.Gradients
}

// microBatch is micro-batch k of the global batch: its k-th share of
// consecutive rows, the batch itself without accumulation.
func (a Accumulation) microBatch(global data.Batch, k int) (data.Batch, error) {
	n := max(a.MicroBatches, 1)
	if n == 1 {
		return global, nil
	}
	rows := len(global.Targets)
	if global.Shape != nil {
		rows = global.Shape[0]
	}
	if rows%n != 0 {
		return data.Batch{}, fmt.Errorf("fabric: a batch of %d rows does not split into %d equal micro-batches", rows, n)
	}
	b, err := global.Share(k, n)
	if err != nil {
		return data.Batch{}, fmt.Errorf("fabric: micro-batch %d: %w", k, err)
	}
	return b, nil
}

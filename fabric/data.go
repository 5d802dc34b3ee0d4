package fabric

import (
	"fmt"

	"github.com/weftml/weft/data"
	"github.com/weftml/weft/tensor"
)

// Dataset is where a Loader draws from: Batch(i) is the i-th global batch
// of the run, every rank's rows of it. It must be a pure function of i
// (and of the seed it was made with), so that every rank draws the same
// batch and a resumed run the batches an uninterrupted one would have,
// and each call returns tensors of its own, which the Loader and its
// caller free.
type Dataset interface {
	Batch(i uint64) (data.Batch, error)
}

// DatasetFunc makes a function a Dataset.
type DatasetFunc func(i uint64) (data.Batch, error)

// Batch returns fn(i).
func (fn DatasetFunc) Batch(i uint64) (data.Batch, error) { return fn(i) }

// RankDataset is a Dataset that can draw rank r of n's rows of a global
// batch without the others' (a distributed sampler's share). A Loader
// uses it when the dataset has it, and else cuts the rows from Batch.
type RankDataset interface {
	Dataset
	Share(i uint64, r, n int) (data.Batch, error)
}

// Loader gives this rank its share of every global batch of a dataset, in
// order: the contiguous rows data.Batch.Share cuts for it, so that the
// ranks' rows, gathered in rank order, are the global batch.
type Loader struct {
	ds   Dataset
	n, r int
	next uint64
}

// SetupDataLoader returns a Loader of ds for this fabric's rank of its
// strategy (all of every batch on one device).
func (f *Fabric) SetupDataLoader(ds Dataset) *Loader {
	n, r := f.ranks()
	return &Loader{ds: ds, n: n, r: r}
}

// Next returns this rank's share of the next global batch; its X, if any,
// is the caller's to free after the step.
func (l *Loader) Next() (data.Batch, error) {
	b, err := l.Share(l.next)
	if err != nil {
		return data.Batch{}, err
	}
	l.next++
	return b, nil
}

// Share returns this rank's share of global batch i.
func (l *Loader) Share(i uint64) (data.Batch, error) {
	if rd, ok := l.ds.(RankDataset); ok {
		return rd.Share(i, l.r, l.n)
	}
	b, err := l.ds.Batch(i)
	if err != nil {
		return data.Batch{}, fmt.Errorf("batch %d: %w", i, err)
	}
	if l.n == 1 {
		return b, nil
	}
	share, err := b.Share(l.r, l.n)
	if err != nil {
		return data.Batch{}, fmt.Errorf("batch %d: %w", i, err)
	}
	if b.X != nil {
		tensor.Free(b.X) // Share copied this rank's rows
	}
	return share, nil
}

// Seek makes global batch i the next (a resumed run's first).
func (l *Loader) Seek(i uint64) { l.next = i }

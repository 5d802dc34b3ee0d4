package train

import (
	"context"
	"errors"
	"fmt"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/strategy"
	"github.com/weftml/weft/tensor"
)

// A run with TP above 1 arranges its Devices ranks as a mesh of
// Devices/TP rows of TP (comm.NewMesh): each row splits the model by its
// tensor-parallel plan (models.TensorPlan) and sees the same data; the
// strategy runs over each column, among whose ranks the batch is shared.
// Checkpoints hold whole weights and optimizer moments, so a run resumes
// (and consolidates) on any mesh shape.

// dataRanks is the number of data-parallel ranks: the mesh's rows.
func (c Config) dataRanks() int { return c.Devices / max(c.TP, 1) }

// validateTP reports a tensor-parallel setting that cannot run.
func (c Config) validateTP() error {
	if c.TP <= 1 {
		switch {
		case c.TP < 0:
			return fmt.Errorf("tp %d: must be at least 1", c.TP)
		case c.SequenceParallel:
			return errors.New("sequence parallel: needs tp above 1 (the sequence is shared by a mesh row's ranks)")
		}
		return nil
	}
	if _, err := models.TensorPlan(c.Model, c.SequenceParallel); err != nil {
		return fmt.Errorf("tp %d: %w", c.TP, err)
	}
	switch {
	case c.SequenceParallel && c.GPT.Context%c.TP != 0:
		return fmt.Errorf("sequence parallel: a context of %d positions does not split over tp %d", c.GPT.Context, c.TP)
	case c.Devices%c.TP != 0:
		return fmt.Errorf("tp %d does not divide devices %d: a mesh row holds tp ranks", c.TP, c.Devices)
	case len(c.LoRA.Targets) > 0:
		return fmt.Errorf("tp %d: lora adapters do not split over tensor-parallel ranks; train them under --strategy ddp or fsdp without --tp", c.TP)
	}
	return nil
}

// Placement is where the ranks of a run train: with TP above 1 the
// world's ranks form a mesh of rows of TP ranks, each row splitting Model
// by its tensor-parallel plan (models.TensorPlan; with SequenceParallel,
// the sequence too), and the strategy runs over each column.
type Placement struct {
	Model            string // its tensor-parallel plan's name: "gpt"
	TP               int
	SequenceParallel bool
	// ShardSize is hsdp's shard group, in data-parallel ranks (2); 0 is
	// a host's, as mpirun counts them (see shardSize).
	ShardSize int
}

// NewFabric builds the fabric of world's rank of a run placed by p, with
// cfg's other settings: weft train and weft parity both build their
// fabrics through it, so that a replay trains as weft train wires its
// ranks. The function it returns closes the rank's mesh and groups.
func NewFabric(ctx context.Context, world comm.Communicator, p Placement, cfg fabric.Config) (*fabric.Fabric, func() error, error) {
	cfg.Comm = world
	var closers []func() error
	closeAll := func() error {
		var err error
		for _, c := range closers {
			err = errors.Join(err, c())
		}
		return err
	}
	data := world
	switch {
	case p.TP > 1:
		plan, err := models.TensorPlan(p.Model, p.SequenceParallel)
		if err != nil {
			return nil, nil, err
		}
		mesh, err := comm.NewMesh(ctx, world, p.TP)
		if err != nil {
			return nil, nil, err
		}
		cfg.Mesh, cfg.TensorPlan, data = mesh, plan, mesh.Data
		closers = append(closers, mesh.Close)
	case p.SequenceParallel:
		return nil, nil, errors.New("sequence parallel: needs tp above 1 (the sequence is shared by a mesh row's ranks)")
	}
	if info, _ := strategy.Lookup(cfg.Strategy); info.Hybrid {
		h, err := hybridGroups(ctx, world, data, p)
		if err != nil {
			return nil, nil, errors.Join(err, closeAll())
		}
		cfg.Sharding.Hybrid = h
		closers = append(closers, h.Close)
	}
	f, err := fabric.New(cfg)
	if err != nil {
		return nil, nil, errors.Join(err, closeAll())
	}
	return f, closeAll, nil
}

// sum is the sum of v over every rank of the run: through the strategy
// when it runs over them all (its collectives keep their order on its
// communicator), else over the world communicator, which a mesh's
// strategy does not use.
func (r *rankRun) sum(ctx context.Context, v float64) (float64, error) {
	if d := r.f.Rank(); d != nil && d.Comm() == r.comm {
		return d.Sum(ctx, v)
	}
	t := tensor.FromFloat64([]float64{v}, 1)
	defer tensor.Free(t)
	if err := comm.AllReduceTensor(ctx, r.comm, t, comm.Sum); err != nil {
		return 0, err
	}
	return t.Float64s()[0], nil
}

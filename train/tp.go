package train

import (
	"context"
	"errors"
	"fmt"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/parallel"
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

// rankMesh is one rank's place in a run's mesh: the communicator its
// strategy runs over, the mesh (nil without tensor parallelism) and
// hsdp's groups of the strategy's ranks (nil for other strategies).
type rankMesh struct {
	data   comm.Communicator
	mesh   *comm.Mesh
	hybrid *comm.Hybrid
}

// newRankMesh places world's rank on c's mesh.
func newRankMesh(ctx context.Context, c Config, world comm.Communicator) (*rankMesh, error) {
	r := &rankMesh{data: world}
	if c.TP > 1 {
		mesh, err := comm.NewMesh(ctx, world, c.TP)
		if err != nil {
			return nil, err
		}
		r.data, r.mesh = mesh.Data, mesh
	}
	if c.Strategy != "hsdp" {
		return r, nil
	}
	shard, err := shardSize(ctx, c, world)
	if err == nil {
		r.hybrid, err = comm.NewHybrid(ctx, r.data, shard)
	}
	if err != nil {
		return nil, errors.Join(err, r.close())
	}
	return r, nil
}

// split splits m across the mesh row and returns its layout (nil without
// tensor parallelism).
func (r *rankMesh) split(c Config, m nn.Module) (*parallel.Layout, error) {
	if r.mesh == nil {
		return nil, nil
	}
	plan, err := models.TensorPlan(c.Model, c.SequenceParallel)
	if err != nil {
		return nil, err
	}
	return parallel.Parallelize(m, r.mesh.Tensor, plan)
}

func (r *rankMesh) close() error {
	var err error
	if r.hybrid != nil {
		err = r.hybrid.Close()
	}
	if r.mesh != nil {
		err = errors.Join(err, r.mesh.Close())
	}
	return err
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

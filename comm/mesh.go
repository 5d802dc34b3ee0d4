package comm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Mesh is one rank's place in a 2-D mesh of N ranks: DP rows (data
// parallelism) of TP columns (tensor parallelism), rank r at row r/TP and
// column r%TP, as Megatron-LM orders them, so that the ranks of a
// tensor-parallel group are adjacent (on one machine, when a machine's
// GPUs fill a row).
type Mesh struct {
	DP, TP   int // rows and columns: N/TP and TP, e.g. 2 and 4 for 8 ranks with --tp 4
	Row, Col int // this rank's coordinates
	// Tensor is this rank's row: the TP ranks that split one replica's
	// tensors, ranked by column.
	Tensor Communicator
	// Data is this rank's column: the DP ranks that hold the same
	// tensor-parallel shard, ranked by row, over which gradients are
	// reduced.
	Data Communicator
}

// NewMesh arranges world's ranks as a mesh of tp columns, splitting it
// into its rows and columns; every rank of world must call it. world stays
// as it was; the mesh's communicators are its own, closed by Close.
func NewMesh(ctx context.Context, world Communicator, tp int) (*Mesh, error) {
	n, r := world.Size(), world.Rank()
	if tp < 1 || n%tp != 0 {
		return nil, fmt.Errorf("comm: mesh: tensor-parallel size %d does not divide %d ranks (accepted: %s)", tp, n, divisors(n))
	}
	tensor, data, err := splitGrid(ctx, world, tp, "mesh: the tensor-parallel groups", "mesh: the data-parallel groups")
	if err != nil {
		return nil, err
	}
	return &Mesh{DP: n / tp, TP: tp, Row: r / tp, Col: r % tp, Tensor: tensor, Data: data}, nil
}

// splitGrid splits c's ranks as a grid of cols columns, rank r at row r/cols
// and column r%cols, into its row (cols adjacent ranks) and its column;
// rows and cols name the two kinds of group in an error.
func splitGrid(ctx context.Context, c Communicator, cols int, rows, columns string) (row, col Communicator, err error) {
	r := c.Rank()
	if row, err = c.Split(ctx, r/cols, r%cols); err != nil {
		return nil, nil, fmt.Errorf("comm: %s: %w", rows, err)
	}
	if col, err = c.Split(ctx, r%cols, r/cols); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("comm: %s: %w", columns, err), row.Close())
	}
	return row, col, nil
}

// Close closes the mesh's communicators.
func (m *Mesh) Close() error {
	return errors.Join(m.Tensor.Close(), m.Data.Close())
}

// divisors lists the divisors of n, "1, 2, 4".
func divisors(n int) string {
	var ds []string
	for d := 1; d <= n; d++ {
		if n%d == 0 {
			ds = append(ds, strconv.Itoa(d))
		}
	}
	return strings.Join(ds, ", ")
}

// Hybrid is one rank's place in hybrid sharding (FSDP2's 2-D mesh
// (replicate, shard), Lightning's HYBRID_SHARD) of a group of N ranks: N/S
// shard groups of S adjacent ranks, rank r in group r/S at position r%S,
// so that a group is one host's ranks when hosts hold S consecutive ranks.
type Hybrid struct {
	// Shard is this rank's shard group: the S ranks among which training
	// state is split, ranked by position.
	Shard Communicator
	// Replica is the N/S ranks at this rank's position, one in every shard
	// group, which hold the same chunks; ranked by group.
	Replica Communicator
}

// NewHybrid splits c into shard groups of shard adjacent ranks and the
// replica groups across them; every rank of c must call it. c stays as it
// was; the groups are the Hybrid's own, closed by Close.
func NewHybrid(ctx context.Context, c Communicator, shard int) (*Hybrid, error) {
	n := c.Size()
	if shard < 1 || n%shard != 0 {
		return nil, fmt.Errorf("comm: hybrid: shard size %d does not divide %d ranks (accepted: %s)", shard, n, divisors(n))
	}
	sh, replica, err := splitGrid(ctx, c, shard, "hybrid: the shard groups", "hybrid: the replica groups")
	if err != nil {
		return nil, err
	}
	return &Hybrid{Shard: sh, Replica: replica}, nil
}

// Close closes the hybrid's groups.
func (h *Hybrid) Close() error {
	return errors.Join(h.Shard.Close(), h.Replica.Close())
}

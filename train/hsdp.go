package train

import (
	"context"
	"errors"
	"fmt"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/tensor"
)

// Under strategy hsdp the data-parallel ranks split into shard groups of
// ShardSize adjacent ranks (comm.NewHybrid), each sharding the state as
// fsdp does, with the gradients all-reduced across the groups. By default
// a group is one host's data-parallel ranks, so that parameter gathers stay
// inside a host and only the sharded gradients cross hosts.

// validateShardSize reports a shard size that cannot run.
func (c Config) validateShardSize() error {
	dp := c.dataRanks()
	switch {
	case c.ShardSize < 0:
		return fmt.Errorf("shard_size %d: must be at least 1 (or 0: the ranks of a host, under mpirun)", c.ShardSize)
	case c.ShardSize > 0 && c.Strategy != "hsdp":
		return fmt.Errorf("shard_size %d applies to strategy hsdp, not %s", c.ShardSize, c.Strategy)
	case c.Strategy != "hsdp":
		return nil
	case c.ShardSize == 0 && c.backend() == "local":
		return errors.New("strategy hsdp with comm local needs --shard-size: in-process ranks have no hosts to group them by")
	case c.ShardSize > 0 && dp%c.ShardSize != 0:
		return fmt.Errorf("shard_size %d does not divide the %d data-parallel ranks", c.ShardSize, dp)
	}
	return nil
}

// hybridGroups makes hsdp's shard and replica groups of data, the
// data-parallel ranks of world.
func hybridGroups(ctx context.Context, world, data comm.Communicator, p Placement) (*comm.Hybrid, error) {
	shard, err := shardSize(ctx, world, p, data.Size())
	if err != nil {
		return nil, err
	}
	return comm.NewHybrid(ctx, data, shard)
}

// shardSize is hsdp's shard group size: p.ShardSize, else the
// data-parallel ranks of one host, from mpirun's count of every host's
// ranks, which the ranks of world compare: hosts holding unequal counts,
// or ranks not placed host by host, have no such size.
func shardSize(ctx context.Context, world comm.Communicator, p Placement, dataRanks int) (int, error) {
	if p.ShardSize > 0 {
		return p.ShardSize, nil
	}
	local, perHost, ok := comm.LauncherLocal()
	if !ok {
		return 0, errors.New("strategy hsdp: give --shard-size: the ranks of a host come from mpirun (OMPI_COMM_WORLD_LOCAL_SIZE), which did not start this process")
	}
	misplaced := float32(0)
	if local != world.Rank()%perHost {
		misplaced = 1
	}
	// The largest count, the smallest (negated) and whether any rank is misplaced.
	agreed := tensor.FromFloat32([]float32{float32(perHost), -float32(perHost), misplaced}, 3)
	defer tensor.Free(agreed)
	if err := comm.AllReduceTensor(ctx, world, agreed, comm.Max); err != nil {
		return 0, fmt.Errorf("strategy hsdp: comparing the ranks of each host: %w", err)
	}
	v := agreed.Float32s()
	most, least, tp := int(v[0]), int(-v[1]), max(p.TP, 1)
	switch {
	case most != least:
		return 0, fmt.Errorf("strategy hsdp: the hosts hold unequal numbers of ranks (%d to %d), so no shard group is one host's; give --shard-size", least, most)
	case v[2] != 0:
		return 0, fmt.Errorf("strategy hsdp: the ranks of a host are not consecutive (mpirun --map-by ppr:%d:node places them so), so no shard group is one host's; give --shard-size", perHost)
	case perHost%tp != 0:
		return 0, fmt.Errorf("strategy hsdp: tp %d does not divide the %d ranks of a host; give --shard-size", tp, perHost)
	case dataRanks%(perHost/tp) != 0:
		return 0, fmt.Errorf("strategy hsdp: a host's %d data-parallel ranks do not divide the %d of the run; give --shard-size", perHost/tp, dataRanks)
	}
	return perHost / tp, nil
}

// plannedShardSize is the shard size a plan of hsdp takes: c.ShardSize,
// else a host's data-parallel ranks as this rank's launcher counts them
// (shardSize checks that every host agrees when the run starts).
func (c Config) plannedShardSize() int {
	if c.ShardSize > 0 {
		return c.ShardSize
	}
	_, perHost, _ := comm.LauncherLocal()
	return max(1, perHost/max(c.TP, 1))
}

// ranksPerHost is the ranks of the run on each host a plan takes: the
// launcher's count, else hsdp's shard groups' (its groups are hosts),
// else all of them on one.
func (c Config) ranksPerHost() int {
	if _, perHost, ok := comm.LauncherLocal(); ok {
		return perHost
	}
	if c.Strategy == "hsdp" && c.ShardSize > 0 {
		return c.ShardSize * max(c.TP, 1)
	}
	return c.Devices
}

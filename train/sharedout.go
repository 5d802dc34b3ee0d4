package train

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/weftml/weft/comm"
)

// probeWait is how long a process looks for the other processes' probe
// files: a network filesystem may show another host's file late.
const probeWait = 3 * time.Second

// checkSharedOut refuses a run folder that the job's processes do not all
// see (each host's --out a folder of its own): every process writes a
// probe file holding the job's token into out and looks for every other
// process's. Every process of world must call it.
func checkSharedOut(ctx context.Context, out string, world comm.Communicator) error {
	n, r := world.Size(), world.Rank()
	token := make([]byte, 16)
	if r == 0 { // this job's, so that an earlier job's probes never count
		binary.LittleEndian.PutUint64(token, uint64(time.Now().UnixNano()))
		binary.LittleEndian.PutUint64(token[8:], uint64(os.Getpid()))
	}
	if err := world.Broadcast(ctx, token, 0); err != nil {
		return err
	}
	mine := probeFile(out, r)
	if err := os.WriteFile(mine, token, 0o644); err != nil {
		return fmt.Errorf("run folder: %w", err)
	}
	defer os.Remove(mine)
	if err := world.Barrier(ctx); err != nil {
		return err
	}
	mineUnseen := binary.LittleEndian.AppendUint64(nil, uint64(int64(firstUnseen(out, n, token))))
	unseen := make([]byte, 8*n) // each rank's first unseen rank, or -1
	if err := world.AllGather(ctx, mineUnseen, unseen); err != nil {
		return err
	}
	for rank := range n {
		if other := int64(binary.LittleEndian.Uint64(unseen[8*rank:])); other >= 0 {
			return fmt.Errorf("run folder %s is not shared: rank %d does not see rank %d's files in it; --out must be on a filesystem every host sees", out, rank, other)
		}
	}
	return nil
}

// firstUnseen is the first rank whose probe file with token this process
// does not see in out within probeWait, or -1.
func firstUnseen(out string, n int, token []byte) int {
	deadline := time.Now().Add(probeWait)
	for rank := 0; rank < n; {
		if b, err := os.ReadFile(probeFile(out, rank)); err == nil && bytes.Equal(b, token) {
			rank++
			continue
		}
		if time.Now().After(deadline) {
			return rank
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1
}

func probeFile(out string, rank int) string {
	return filepath.Join(out, fmt.Sprintf(".probe-rank-%d", rank))
}

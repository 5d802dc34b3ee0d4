package train

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/tensor"
)

// checkJob refuses a job whose processes differ where they must agree:
// the run folder they all see, the weft binary each runs, and the data
// each host reads for itself. Every process of world must call it.
func checkJob(ctx context.Context, out string, t *task, world comm.Communicator) error {
	if err := checkSharedOut(ctx, out, world); err != nil {
		return err
	}
	bin, input, err := jobDigests(t)
	if err != nil {
		return err
	}
	all := make([]byte, 2*sha256.Size*world.Size())
	if err := world.AllGather(ctx, append(bin, input...), all); err != nil {
		return err
	}
	for rank := 1; rank < world.Size(); rank++ {
		theirs := all[2*sha256.Size*rank:]
		switch {
		case !bytes.Equal(theirs[:sha256.Size], all[:sha256.Size]):
			return fmt.Errorf("rank %d runs another weft binary than rank 0: every host must run the same build", rank)
		case !bytes.Equal(theirs[sha256.Size:2*sha256.Size], all[sha256.Size:2*sha256.Size]):
			return fmt.Errorf("rank %d reads other data than rank 0 (its first batches differ): every host must hold the same --data, corpus and tokenizer", rank)
		}
	}
	return nil
}

// jobDigests are SHA-256 digests of this process's executable and of the
// task's first training and validation batches.
func jobDigests(t *task) (bin, input []byte, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("job check: %w", err)
	}
	f, err := os.Open(exe)
	if err != nil {
		return nil, nil, fmt.Errorf("job check: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, nil, fmt.Errorf("job check: %s: %w", exe, err)
	}
	bin = h.Sum(nil)
	h.Reset()
	for _, b := range []data.Batch{t.batch(0), t.val(0)} {
		hashBatch(h, b)
	}
	return bin, h.Sum(nil), nil
}

// hashBatch writes b's tokens, targets and inputs to h, and frees b.
func hashBatch(h hash.Hash, b data.Batch) {
	var ints []byte
	for _, v := range [][]int{b.Tokens, b.Targets} {
		for _, x := range v {
			ints = binary.LittleEndian.AppendUint64(ints, uint64(x))
		}
	}
	h.Write(ints)
	if b.X != nil {
		h.Write(b.X.Data())
		tensor.Free(b.X)
	}
}

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

package train

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/weftml/weft/checkpoint"
	"github.com/weftml/weft/tensor"
)

// hsdpRun trains c (10 steps, 4 ranks) under strategy with shard size
// shard (0: none) into a folder of its own and returns it.
func hsdpRun(t *testing.T, c Config, strategy string, shard int) string {
	t.Helper()
	c.Strategy, c.ShardSize, c.Out = strategy, shard, t.TempDir()
	if _, err := Run(context.Background(), c, false, quiet{}); err != nil {
		t.Fatalf("%s, shard size %d: %v", strategy, shard, err)
	}
	return c.Out
}

// TestHSDPMatchesFSDP: hsdp on 4 ranks with one shard group of 4 is fsdp
// and with 4 groups of 1 ddp, bit for bit (the same sums in the same
// order). With 2 groups of 2 it sums each gradient as (g0+g1)+(g2+g3)
// where fsdp sums ((g0+g1)+g2)+g3, a reassociation: in 64-true each sum
// moves by a few units of 2⁻⁵³ of its terms, and AdamW's steps of at most
// lr a weight keep the weights within 1e-9 of fsdp's after 10 steps (they
// differ: the path is not fsdp's) and the losses within 1e-9.
func TestHSDPMatchesFSDP(t *testing.T) {
	c := tinyConfig(t, "64-true")
	c.Devices, c.Steps, c.SaveEvery = 4, 10, 10
	fsdp := hsdpRun(t, c, "fsdp", 0)
	sameLosses(t, fsdp, hsdpRun(t, c, "hsdp", 4))
	sameLosses(t, hsdpRun(t, c, "ddp", 0), hsdpRun(t, c, "hsdp", 1))
	hsdp := hsdpRun(t, c, "hsdp", 2)
	closeLosses(t, hsdp, fsdp, 1e-9)
	want, got := consolidated(t, fsdp), consolidated(t, hsdp)
	var most float64
	for _, name := range want.Names() {
		w, _ := want.Tensor(name)
		g, ok := got.Tensor(name)
		if !ok || len(g.Data) != len(w.Data) {
			t.Fatalf("hsdp's checkpoint lacks fsdp's %s", name)
		}
		if strings.HasPrefix(name, "model.") {
			most = max(most, maxDiff(t, w, g))
		}
	}
	t.Logf("hsdp's weights are within %g of fsdp's", most)
	if most == 0 || most > 1e-9 {
		t.Fatalf("hsdp's weights differ from fsdp's by up to %g; want a reassociation's (above 0, at most 1e-9)", most)
	}
}

// maxDiff is the largest difference between two float64 tensors' elements.
func maxDiff(t *testing.T, a, b checkpoint.Tensor) float64 {
	t.Helper()
	x, errA := tensor.FromBytes(a.DType, a.Data, a.Shape...)
	y, errB := tensor.FromBytes(b.DType, b.Data, b.Shape...)
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	defer tensor.Free(x)
	defer tensor.Free(y)
	var d float64
	ys := y.Float64s()
	for i, v := range x.Float64s() {
		d = max(d, math.Abs(v-ys[i]))
	}
	return d
}

// TestHSDPResume: hsdp (2 groups of 2) resumes bit for bit in bf16 with
// FP8 weights (gathered as 1-byte codes inside a group), its checkpoint
// holds one copy of the optimizer chunks (the first group's), which
// consolidate joins whole, and it resumes on 2 fsdp ranks.
func TestHSDPResume(t *testing.T) {
	straight := tinyConfig(t, "bf16-mixed+fp8")
	straight.Strategy, straight.Devices, straight.ShardSize = "hsdp", 4, 2
	split := straightAndResumed(t, straight, 10)
	sameLosses(t, straight.Out, split)
	m, _, err := LatestCheckpoint(split + "/checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	if m.OptimizerShards != 2 {
		t.Errorf("the checkpoint has %d optimizer shards, want the 2 of a shard group", m.OptimizerShards)
	}
	if w, ok := consolidated(t, split).Tensor("optim.blocks.0.fc.weight.exp_avg"); !ok || !tensor.EqualShape(w.Shape, []int{4 * straight.GPT.Width, straight.GPT.Width}) {
		t.Fatalf("the consolidated moment is %v, want the whole [%d %d]", w.Shape, 4*straight.GPT.Width, straight.GPT.Width)
	}
	onFSDP := straight
	onFSDP.Out, onFSDP.Strategy, onFSDP.Devices, onFSDP.ShardSize, onFSDP.Steps = split, "fsdp", 2, 0, 24
	if _, err := Run(context.Background(), onFSDP, true, quiet{}); err != nil {
		t.Fatalf("resuming hsdp's checkpoint on 2 fsdp ranks: %v", err)
	}
}

// TestHSDPRefusals: settings hsdp cannot run are refused before any rank
// starts, in one line naming the conflict.
func TestHSDPRefusals(t *testing.T) {
	for _, tc := range []struct {
		strategy    string
		devices, tp int
		shard       int
		want        string
	}{
		{"hsdp", 4, 1, 0, "strategy hsdp with comm local needs --shard-size: in-process ranks have no hosts to group them by"},
		{"hsdp", 4, 1, 3, "shard_size 3 does not divide the 4 data-parallel ranks"},
		{"hsdp", 8, 2, 3, "shard_size 3 does not divide the 4 data-parallel ranks"},
		{"fsdp", 4, 1, 2, "shard_size 2 applies to strategy hsdp, not fsdp"},
		{"hsdp", 4, 1, -1, "shard_size -1: must be at least 1 (or 0: the ranks of a host, under mpirun)"},
	} {
		c := tinyConfig(t, "32-true")
		c.Strategy, c.Devices, c.TP, c.ShardSize, c.BatchSize = tc.strategy, tc.devices, tc.tp, tc.shard, 8
		_, err := Run(context.Background(), c, false, quiet{})
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s on %d ranks, tp %d, shard size %d: %v, want %q", tc.strategy, tc.devices, tc.tp, tc.shard, err, tc.want)
		}
	}
}

// TestHSDPLowBit: hsdp's low-bit optimizer state (adamw8bit, adamw4bit,
// adamwfp8) is fsdp's with one shard group of 4 and ddp's with 4 groups
// of 1, bit for bit: its chunks are whole blocks of the same parameters.
func TestHSDPLowBit(t *testing.T) {
	for _, spec := range []string{"bf16-mixed+adamw8bit", "bf16-mixed+adamw4bit", "bf16-mixed+adamwfp8"} {
		t.Run(spec, func(t *testing.T) {
			c := tinyConfig(t, spec)
			c.Devices, c.Steps, c.SaveEvery = 4, 6, 6
			sameLosses(t, hsdpRun(t, c, "fsdp", 0), hsdpRun(t, c, "hsdp", 4))
			sameLosses(t, hsdpRun(t, c, "ddp", 0), hsdpRun(t, c, "hsdp", 1))
		})
	}
}

package fabric_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/local"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/strategy"
	"github.com/weftml/weft/tensor"
)

// f64Batches returns n fixed random float64 batches of rows rows for the MLP.
func f64Batches(n, rows int) []data.Batch {
	rng := rand.New(rand.NewPCG(3, 9))
	out := make([]data.Batch, n)
	for i := range out {
		x, y := make([]float64, rows*32), make([]int, rows)
		for j := range x {
			x[j] = rng.NormFloat64()
		}
		for j := range y {
			y[j] = rng.IntN(10)
		}
		out[i] = data.Batch{X: tensor.FromFloat64(x, rows, 32), Targets: y}
	}
	return out
}

// accumulated is what a run of TrainSteps left: every rank's losses and
// gradient norms (with Config.ClipNorm) and rank 0's parameters, whole.
type accumulated struct {
	losses [][]float64
	norms  [][]float64
	params map[string][]float64
	stats  []comm.Stats
}

// trainAccumulating trains the float64 MLP on batches with strategy st
// over n ranks ("single": one device, no communicator) with cfg's
// settings (accumulation, clipping).
func trainAccumulating(t *testing.T, st string, n int, cfg fabric.Config, bs []data.Batch) accumulated {
	t.Helper()
	out := accumulated{losses: make([][]float64, n), norms: make([][]float64, n), stats: make([]comm.Stats, n)}
	rank := func(i int, c comm.Communicator) error {
		m := models.NewMLP(nn.NewInit(1))
		f, err := pureF64(m, st, c, cfg)
		if err != nil {
			return err
		}
		for _, b := range bs {
			res, err := f.TrainStep(context.Background(), m, rankShare(t, f, b))
			if err != nil {
				return err
			}
			out.losses[i] = append(out.losses[i], res.Loss)
			out.norms[i] = append(out.norms[i], res.GradNorm)
		}
		if err := f.Gather(); err != nil {
			return err
		}
		if i == 0 {
			out.params = map[string][]float64{}
			for _, p := range nn.Parameters(m) {
				out.params[p.Path] = p.Var.Value.Float64s()
			}
		}
		if c != nil {
			out.stats[i] = c.Stats()
		}
		return nil
	}
	var err error
	if st == "single" {
		err = rank(0, nil)
	} else {
		err = comm.Each(local.NewGroup(n, local.Options{}), rank)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pureF64 sets up m in float64 throughout, its loss too, on rank c of
// strategy st (c nil: on one device), with cfg's other settings.
func pureF64(m fabric.Model, st string, c comm.Communicator, cfg fabric.Config) (*fabric.Fabric, error) {
	opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
	if err != nil {
		return nil, err
	}
	cfg.Precision, cfg.Comm = precision.Pure{DType: dtype.F64}, c
	if c != nil {
		cfg.Strategy = st
		if info, _ := strategy.Lookup(st); info.Hybrid && cfg.Sharding.Hybrid == nil { // 2 replicas of 1 rank each on 2 ranks, to cross the groups
			if cfg.Sharding.Hybrid, err = comm.NewHybrid(context.Background(), c, c.Size()/2); err != nil {
				return nil, err
			}
		}
	}
	f, err := fabric.New(cfg)
	if err != nil {
		return nil, err
	}
	return f, f.Setup(m, opt)
}

// relDiff is the largest |a-b| over the largest |b| of two parameter sets.
func relDiff(t *testing.T, a, b map[string][]float64) float64 {
	t.Helper()
	var diff, scale float64
	for path, want := range b {
		got, ok := a[path]
		if !ok || len(got) != len(want) {
			t.Fatalf("%s: %d values, want %d", path, len(got), len(want))
		}
		for i := range want {
			diff, scale = max(diff, math.Abs(got[i]-want[i])), max(scale, math.Abs(want[i]))
		}
	}
	return diff / scale
}

// TestGradAccumulationIsExact: K micro-batches of B/K rows train, in
// float64, the weights and losses one batch of B rows trains on one
// device, to 1e-9, under every strategy on 2 ranks and every sync choice.
func TestGradAccumulationIsExact(t *testing.T) {
	bs := f64Batches(3, 8)
	want := trainAccumulating(t, "single", 1, fabric.Config{}, bs)
	for _, st := range strategy.Names() {
		n := 2
		if st == "single" {
			n = 1
		}
		for _, k := range []int{2, 4} {
			for _, sync := range []fabric.GradSync{fabric.SyncAuto, fabric.SyncEvery, fabric.SyncLast} {
				t.Run(fmt.Sprintf("%s/k%d/%v", st, k, sync), func(t *testing.T) {
					got := trainAccumulating(t, st, n, fabric.Config{Accumulation: fabric.Accumulation{MicroBatches: k, Sync: sync}}, bs)
					if d := relDiff(t, got.params, want.params); d > 1e-9 {
						t.Errorf("weights differ from one batch's by %g relative", d)
					}
					for r := range n {
						for s, l := range got.losses[r] {
							if math.Abs(l-want.losses[0][s]) > 1e-9*math.Abs(want.losses[0][s]) {
								t.Errorf("rank %d step %d: loss %v, one batch %v", r, s, l, want.losses[0][s])
							}
						}
					}
				})
			}
		}
	}
}

// TestGradAccumulationScaled: under a loss scaler every micro-batch's
// loss is scaled alike and the accumulated gradients are unscaled once, at
// the step: the weights are those of unscaled whole batches, and the
// scaler counts steps, not micro-batches (growing once in 2 steps of 4
// micro-batches with a growth interval of 2).
func TestGradAccumulationScaled(t *testing.T) {
	bs := f64Batches(2, 8)
	m, ref := models.NewMLP(nn.NewInit(1)), models.NewMLP(nn.NewInit(1))
	train := func(m *models.MLP, p precision.Plugin, k int) *fabric.Fabric {
		f := newFabric(t, fabric.Config{Precision: p, Accumulation: fabric.Accumulation{MicroBatches: k}})
		opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Setup(m, opt); err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			b.X = b.X.To(dtype.F32)
			if _, err := f.TrainStep(context.Background(), m, b); err != nil {
				t.Fatal(err)
			}
		}
		return f
	}
	train(ref, &noRoles{}, 1)
	scaled := newScaleOnly(1024)
	scaled.s.GrowthInterval = 2
	if got := train(m, scaled, 4).LossScale(); got != 2048 {
		t.Errorf("loss scale %v after 2 steps of 4 micro-batches, want 2048 (grown once)", got)
	}
	a, b := map[string][]float64{}, map[string][]float64{}
	for _, p := range nn.Parameters(m) {
		a[p.Path] = p.Var.Value.Float64s()
	}
	for _, p := range nn.Parameters(ref) {
		b[p.Path] = p.Var.Value.Float64s()
	}
	if d := relDiff(t, a, b); d > 1e-6 { // float32 weights
		t.Errorf("scaled, accumulated weights differ from one unscaled batch's by %g relative", d)
	}
}

// TestNoBackwardSyncSkipsReductions: over 4 micro-batches DDP all-reduces
// once per step by default (no_backward_sync on all but the last), four
// times with SyncEvery; FSDP reduce-scatters every micro-batch by default,
// once with SyncLast. The bytes follow the calls.
func TestNoBackwardSyncSkipsReductions(t *testing.T) {
	bs := f64Batches(1, 8)
	for _, c := range []struct {
		strategy string
		coll     comm.Collective
		sync     fabric.GradSync
		times    int64 // the reductions of one step without accumulation
	}{
		{"ddp", comm.AllReduce, fabric.SyncAuto, 1}, {"ddp", comm.AllReduce, fabric.SyncEvery, 4},
		{"fsdp", comm.ReduceScatter, fabric.SyncAuto, 4}, {"fsdp", comm.ReduceScatter, fabric.SyncLast, 1},
	} {
		once := trainAccumulating(t, c.strategy, 2, fabric.Config{}, bs).stats[0]
		got := trainAccumulating(t, c.strategy, 2, fabric.Config{Accumulation: fabric.Accumulation{MicroBatches: 4, Sync: c.sync}}, bs).stats[0]
		key := comm.Key{Collective: c.coll, DType: dtype.F64}
		if once.Calls[c.coll] == 0 || got.Calls[c.coll] != c.times*once.Calls[c.coll] || got.Bytes[key] != c.times*once.Bytes[key] {
			t.Errorf("%s sync %v: %d %v calls, %d bytes; one step without accumulation makes %d, %d bytes; want %d times those",
				c.strategy, c.sync, got.Calls[c.coll], c.coll, got.Bytes[key], once.Calls[c.coll], once.Bytes[key], c.times)
		}
	}
}

// TestNoBackwardSyncKeepsFSDPGradientsWhole: between micro-batches an
// FSDP rank holds its chunks of the gradients (half the model's on 2
// ranks); inside NoBackwardSync it holds the model's whole gradients,
// the memory no_backward_sync costs, until a synced backward shards them.
func TestNoBackwardSyncKeepsFSDPGradientsWhole(t *testing.T) {
	b := f64Batches(1, 8)[0]
	var whole, chunks int64
	for _, p := range nn.Parameters(models.NewMLP(nn.NewInit(1))) {
		n := p.Var.Value.Len()
		whole, chunks = whole+int64(n*8), chunks+int64(strategy.Chunk(n, 1, 2)*8)
	}
	got := make([][3]int64, 2)
	err := comm.Each(local.NewGroup(2, local.Options{}), func(i int, c comm.Communicator) error {
		m := models.NewMLP(nn.NewInit(1))
		f, err := pureF64(m, "fsdp", c, fabric.Config{})
		if err != nil {
			return err
		}
		share, err := b.Share(i, 2)
		if err != nil {
			return err
		}
		for k, skip := range []bool{false, true, false} {
			if err := f.NoBackwardSync(skip, func() error { fabricLoss(t, f, m, share); return nil }); err != nil {
				return err
			}
			_, got[i][k] = fabric.RankBytes(f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, g := range got {
		if g[0] != chunks || g[2] != chunks {
			t.Errorf("rank %d: synced backwards leave %d and %d gradient bytes; want the chunks' %d", r, g[0], g[2], chunks)
		}
		if g[1] != chunks+whole {
			t.Errorf("rank %d: inside NoBackwardSync %d gradient bytes; want the whole model's %d beside the chunks' %d", r, g[1], whole, chunks)
		}
	}
}

// TestClipGradValue: every gradient element ends in [-clip, clip], those
// inside unchanged, as clip_grad_value_ leaves them, after unscaling once.
func TestClipGradValue(t *testing.T) {
	m := models.NewMLP(nn.NewInit(1))
	f := newFabric(t, fabric.Config{Precision: newScaleOnly(512)})
	opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Setup(m, opt); err != nil {
		t.Fatal(err)
	}
	if err := f.ClipGradValue(0); err == nil {
		t.Error("ClipGradValue(0) accepted")
	}
	fabricLoss(t, f, m, batches(1)[0])
	before := grads(opt.Params())
	const clip = 1e-3
	if err := f.ClipGradValue(clip); err != nil {
		t.Fatal(err)
	}
	var clipped, kept int
	for path, g := range grads(opt.Params()) {
		for i, v := range g {
			want := before[path][i] / 512 // unscaled: 512 is a power of two
			switch {
			case math.Abs(float64(want)) > clip:
				want = float32(math.Copysign(clip, float64(want)))
				clipped++
			default:
				kept++
			}
			if v != want {
				t.Fatalf("%s[%d] = %v, want %v", path, i, v, want)
			}
		}
	}
	if clipped == 0 || kept == 0 {
		t.Errorf("%d elements clipped, %d kept: the test needs both", clipped, kept)
	}
}

// TestSkipMidAccumulation: a micro-batch whose loss is NaN skips the
// step (SkipNonFinite) and drops what the earlier micro-batches
// accumulated, so the next step trains as if the skipped one never ran.
func TestSkipMidAccumulation(t *testing.T) {
	good := f64Batches(1, 8)[0]
	bad := f64Batches(1, 8)[0]
	vals := bad.X.Float64s()
	vals[len(vals)-1] = math.NaN() // in the last micro-batch
	bad.X = tensor.FromFloat64(vals, 8, 32)
	want := trainAccumulating(t, "single", 1, fabric.Config{}, []data.Batch{good})
	for _, st := range []string{"single", "ddp", "fsdp"} {
		n := 2
		if st == "single" {
			n = 1
		}
		params := make([]map[string][]float64, n)
		rank := func(i int, c comm.Communicator) error {
			m := models.NewMLP(nn.NewInit(1))
			f, err := pureF64(m, st, c, fabric.Config{Accumulation: fabric.Accumulation{MicroBatches: 2}, OnNonFinite: fabric.SkipNonFinite})
			if err != nil {
				return err
			}
			if res, err := f.TrainStep(context.Background(), m, rankShare(t, f, bad)); err != nil || !res.Skipped {
				return fmt.Errorf("the NaN batch: %+v, %v; want it skipped", res, err)
			}
			if _, err := f.TrainStep(context.Background(), m, rankShare(t, f, good)); err != nil {
				return err
			}
			if err := f.Gather(); err != nil {
				return err
			}
			params[i] = map[string][]float64{}
			for _, p := range nn.Parameters(m) {
				params[i][p.Path] = p.Var.Value.Float64s()
			}
			return nil
		}
		var err error
		if c := local.NewGroup(n, local.Options{}); st == "single" {
			err = rank(0, nil)
		} else {
			err = comm.Each(c, rank)
		}
		if err != nil {
			t.Fatalf("%s: %v", st, err)
		}
		for i := range n {
			if d := relDiff(t, params[i], want.params); d > 1e-9 {
				t.Errorf("%s rank %d: weights after a skipped and a good step differ from one good step's by %g", st, i, d)
			}
		}
	}
}

// TestGradAccumulationFP8: delayed scaling records one amax per forward
// and per backward, so every micro-batch enters the histories, as
// Transformer Engine's recipe does per forward.
func TestGradAccumulationFP8(t *testing.T) {
	const width, depth, steps = 32, 2, 3
	x := tensor.New(dtype.F32, 8, width)
	for i := range x.Len() {
		x.Flat(i, 1).Fill(float64(i%7) - 3)
	}
	b := data.Batch{X: x, Targets: []int{1, 2, 3, 4, 5, 6, 7, 8}}
	for _, k := range []int{1, 2, 4} {
		s := &stack{}
		for range depth {
			s.Layers = append(s.Layers, &probed{FC: nn.NewLinear(nn.NewInit(4), width, width, true), s: s})
		}
		f := newFabric(t, fabric.Config{Precision: mustParse(t, "transformer-engine"), Accumulation: fabric.Accumulation{MicroBatches: k}})
		opt, err := optim.NewAdamW(nn.Parameters(s), adamW)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Setup(s, opt); err != nil {
			t.Fatal(err)
		}
		for range steps {
			if _, err := f.TrainStep(context.Background(), s, b); err != nil {
				t.Fatal(err)
			}
		}
		histories := 0
		for name, st := range f.States() {
			raw, err := st.MarshalState()
			if err != nil {
				t.Fatal(err)
			}
			var layers map[string]map[string]struct {
				History []uint32 `json:"amax_history"`
			}
			if json.Unmarshal(raw, &layers) != nil {
				continue // not an FP8 recipe's state
			}
			for path, roles := range layers {
				for role, saved := range roles {
					histories++
					if len(saved.History) != steps*k {
						t.Errorf("k=%d %s %s %s: %d amaxes in the history, want one per micro-batch: %d", k, name, path, role, len(saved.History), steps*k)
					}
				}
			}
		}
		if histories != depth*3 { // x, w and dy of every layer
			t.Errorf("k=%d: %d amax histories, want %d", k, histories, depth*3)
		}
	}
}

// TestManualAccumulation: a Lightning-style loop of one's own, each
// micro-batch's loss weighted 1/K and all but the last backward inside
// NoBackwardSync, trains on 2 ddp or fsdp ranks the weights of whole
// batches on one device.
func TestManualAccumulation(t *testing.T) {
	const k = 4
	bs := f64Batches(2, 8)
	want := trainAccumulating(t, "single", 1, fabric.Config{}, bs)
	for _, st := range []string{"ddp", "fsdp"} {
		var got map[string][]float64
		err := comm.Each(local.NewGroup(2, local.Options{}), func(i int, c comm.Communicator) error {
			m := models.NewMLP(nn.NewInit(1))
			f, err := pureF64(m, st, c, fabric.Config{})
			if err != nil {
				return err
			}
			for _, b := range bs {
				for j := range k {
					micro, err := b.Share(j, k)
					if err != nil {
						return err
					}
					mine, err := micro.Share(i, 2)
					if err != nil {
						return err
					}
					err = f.NoBackwardSync(j < k-1, func() error {
						logits, err := f.Forward(func(tp *autograd.Tape) (*autograd.Var, error) { return m.Forward(tp, mine) })
						if err != nil {
							return err
						}
						loss, err := f.Tape().CrossEntropy(logits, mine.Targets)
						if err != nil {
							return err
						}
						return f.Backward(f.Tape().Scale(loss, 1.0/k))
					})
					if err != nil {
						return err
					}
				}
				if _, err := f.Step(); err != nil {
					return err
				}
			}
			if err := f.Gather(); err != nil || i != 0 {
				return err
			}
			got = map[string][]float64{}
			for _, p := range nn.Parameters(m) {
				got[p.Path] = p.Var.Value.Float64s()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if d := relDiff(t, got, want.params); d > 1e-9 {
			t.Errorf("%s: weights differ from whole batches' by %g relative", st, d)
		}
	}
}

package fabric_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
)

// gptRun is what a few steps of a gpt on one rank left: its losses, its
// weights (made whole), the bytes its strategy gathered by dtype and its
// communicator's counts.
type gptRun struct {
	losses   []float64
	weights  map[string][]float32
	gathered map[dtype.DType]int64
	stats    comm.Stats
}

// trainGPT trains the reference gpt (its head tied if tied) for steps
// steps of spec under strategy st on c's rank.
func trainGPT(t *testing.T, spec, st string, c comm.Communicator, tied bool, steps int) (gptRun, error) {
	cfg, b := gptBatch(tied)
	pol, _, err := precision.ParsePolicy(spec, nil, "auto", precision.Options{})
	if err != nil {
		return gptRun{}, err
	}
	f, err := fabric.New(fabric.Config{Policy: pol, Seed: 3, Strategy: st, Comm: c})
	if err != nil {
		return gptRun{}, err
	}
	m := models.NewGPT(f.InitModule(false), cfg)
	opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
	if err != nil {
		return gptRun{}, err
	}
	if err := f.Setup(m, opt); err != nil {
		return gptRun{}, err
	}
	var run gptRun
	for range steps {
		res, err := f.TrainStep(context.Background(), m, rankShare(t, f, b))
		if err != nil {
			return gptRun{}, err
		}
		run.losses = append(run.losses, res.Loss)
	}
	run.gathered, run.stats = f.Rank().Gathered(), c.Stats()
	if err := f.Gather(); err != nil {
		return gptRun{}, err
	}
	run.weights = map[string][]float32{}
	for _, p := range nn.Parameters(m) {
		run.weights[p.Path] = p.Var.Value.Float32s()
	}
	return run, nil
}

// gptBatch is the reference gpt's config, its head tied if tied, and a
// batch of 4 sequences for it.
func gptBatch(tied bool) (models.GPTConfig, data.Batch) {
	cfg := models.ReferenceGPT
	cfg.TiedHead = tied
	b := data.Batch{Shape: []int{4, cfg.Context}}
	for i := range 4 * cfg.Context {
		b.Tokens = append(b.Tokens, (7*i+3)%cfg.Vocab)
		b.Targets = append(b.Targets, (5*i+1)%cfg.Vocab)
	}
	return cfg, b
}

// sameRun says how two runs differ, "" if bit for bit they do not.
func sameRun(a, b gptRun) string {
	if !slices.Equal(a.losses, b.losses) {
		return fmt.Sprintf("losses %v and %v", a.losses, b.losses)
	}
	for path, w := range a.weights {
		for i, v := range w {
			if math.Float32bits(v) != math.Float32bits(b.weights[path][i]) {
				return fmt.Sprintf("%s[%d] %g and %g", path, i, v, b.weights[path][i])
			}
		}
	}
	return ""
}

// TestFSDPGathersWhatAutocastRounds: under bf16-mixed and 16-mixed fsdp
// gathers the Linears' weights and biases in the autocast dtype and the
// rest (LayerNorms, embeddings, a tied head's embedding) in float32, and
// trains a gpt on 2 ranks to the losses and weights of ddp, bit for bit:
// the GEMMs round those weights so anyway.
func TestFSDPGathersWhatAutocastRounds(t *testing.T) {
	for _, c := range []struct {
		spec string
		low  dtype.DType
		tied bool
	}{{"bf16-mixed", dtype.BF16, false}, {"16-mixed", dtype.F16, false}, {"bf16-mixed", dtype.BF16, true}} {
		runs := map[string][]gptRun{}
		for _, st := range []string{"ddp", "fsdp"} {
			runs[st] = make([]gptRun, 2)
			onRanks(t, 2, func(r int, cm comm.Communicator) (err error) {
				runs[st][r], err = trainGPT(t, c.spec, st, cm, c.tied, 3)
				return err
			})
		}
		for r := range 2 {
			if d := sameRun(runs["fsdp"][r], runs["ddp"][r]); d != "" {
				t.Errorf("%s tied %v rank %d: fsdp and ddp differ: %s", c.spec, c.tied, r, d)
			}
			g := runs["fsdp"][r].gathered
			if g[c.low] == 0 || g[dtype.F32] == 0 || len(g) != 2 {
				t.Errorf("%s tied %v rank %d: fsdp gathered %v bytes, want %s and float32", c.spec, c.tied, r, g, c.low)
			}
		}
	}
}

// TestPredictedGathersAreSent: the bytes a plan predicts each rank's
// parameter all-gathers send in a step are those its communicator counts
// for a gpt on 4 in-process fsdp ranks (but for the loss's gather, under
// 1%), and dtype by dtype those its strategy counts: bf16-mixed's
// weights in bfloat16, param_dtype's in float16, FP8 codes and their
// scales; bf16-mixed gathers at most 0.6 of 32-true's bytes.
func TestPredictedGathersAreSent(t *testing.T) {
	gathered := map[string]int64{}
	for _, spec := range []string{"32-true", "bf16-mixed", "bf16-mixed(param_dtype=float16)", "bf16-mixed+fp8"} {
		pol, _, err := precision.ParsePolicy(spec, nil, "auto", precision.Options{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := fabric.MakePlan(models.NewGPT(nn.Meta(3), models.ReferenceGPT), pol, precision.LossScalingAuto, "fsdp", 4)
		if err != nil {
			t.Fatal(err)
		}
		p.PredictTraffic(4, false)
		runs := make([]gptRun, 4)
		onRanks(t, 4, func(r int, cm comm.Communicator) (err error) {
			runs[r], err = trainGPT(t, spec, "fsdp", cm, false, 1)
			return err
		})
		for _, want := range p.Traffic.Gathers {
			gathered[spec] += want.Bytes
		}
		for r, run := range runs {
			sent := run.stats.Bytes[comm.Key{Collective: comm.AllGather}] * 3 // to each of 3 peers
			if want := gathered[spec]; sent < want || sent > want+want/100 {
				t.Errorf("%s rank %d: all-gathers sent %d bytes, the plan predicts %d for the parameters", spec, r, sent, want)
			}
			got := map[string]int64{}
			for dt, b := range run.gathered {
				got[dt.String()] = b * 3
			}
			for _, want := range p.Traffic.Gathers {
				if got[want.DType] != want.Bytes {
					t.Errorf("%s rank %d: the strategy gathered %d bytes of %s, the plan predicts %d", spec, r, got[want.DType], want.DType, want.Bytes)
				}
			}
			if len(got) != len(p.Traffic.Gathers) {
				t.Errorf("%s rank %d: the strategy gathered %v, the plan predicts %+v", spec, r, got, p.Traffic.Gathers)
			}
		}
	}
	t.Logf("bytes gathered a step: %v", gathered)
	if got, full := gathered["bf16-mixed"], gathered["32-true"]; got == 0 || float64(got) > 0.6*float64(full) {
		t.Errorf("bf16-mixed gathers %d bytes a step, 32-true %d: want at most 0.6 of it", got, full)
	}
}

package fabric_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/quant"
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
// steps of spec under strategy st on c's rank, its config changed by
// each of with.
func trainGPT(t *testing.T, spec, st string, c comm.Communicator, tied bool, steps int, with ...func(*fabric.Config)) (gptRun, error) {
	cfg, b := gptBatch(tied)
	pol, _, err := precision.ParsePolicy(spec, nil, "auto", precision.Options{})
	if err != nil {
		return gptRun{}, err
	}
	fc := fabric.Config{Policy: pol, Seed: 3, Strategy: st, Comm: c}
	for _, w := range with {
		w(&fc)
	}
	f, err := fabric.New(fc)
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
// batch of 12 sequences for it, which 2, 3 and 4 ranks share evenly.
func gptBatch(tied bool) (models.GPTConfig, data.Batch) {
	cfg := models.ReferenceGPT
	cfg.TiedHead = tied
	b := data.Batch{Shape: []int{12, cfg.Context}}
	for i := range 12 * cfg.Context {
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
// 2%), and dtype by dtype those its strategy counts: bf16-mixed's
// weights in bfloat16, param_dtype's in float16, FP8 codes and their
// scales, MXFP8's and NVFP4's codes; bf16-mixed gathers at most 0.6 of
// 32-true's bytes.
func TestPredictedGathersAreSent(t *testing.T) {
	gathered := map[string]int64{}
	for _, spec := range []string{"32-true", "bf16-mixed", "bf16-mixed(param_dtype=float16)", "bf16-mixed+fp8", "bf16-mixed+fp8-mx", "bf16-mixed+nvfp4"} {
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
			if want := gathered[spec]; sent < want || sent > want+want/50 {
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

// TestFSDPGathersBlockCodes: under fsdp every FP8 and FP4 recipe that
// scales at the cast sends its Linears' weights as the codes of that cast
// (a byte, or half of one, an element, beside float32 amaxes the ranks
// agree on first), and a gpt trains on 3 ranks, whose chunks cut blocks
// and rows, to ddp's losses and weights bit for bit: the codes are those
// of the whole weight.
func TestFSDPGathersBlockCodes(t *testing.T) {
	// sent is what a rank's all-gathers and all-reductions (the amaxes,
	// beside the loss's) sent in its run.
	sent := func(run gptRun) (b int64) {
		for k, n := range run.stats.Bytes {
			if k.Collective == comm.AllGather || k.Collective == comm.AllReduce {
				b += n
			}
		}
		return b
	}
	bf16 := make([]gptRun, 3)
	onRanks(t, 3, func(r int, cm comm.Communicator) (err error) {
		bf16[r], err = trainGPT(t, "bf16-mixed", "fsdp", cm, false, 3)
		return err
	})
	for _, c := range []struct {
		spec string
		code dtype.DType
	}{
		{"bf16-mixed+fp8-current", dtype.E4M3FN},
		{"bf16-mixed+fp8-mx", dtype.E4M3FN},
		{"bf16-mixed+fp8-rowwise", dtype.E4M3FN},
		{"bf16-mixed+fp8-rowwise-gw-hp", dtype.E4M3FN},
		{"bf16-mixed+mxfp4", dtype.E2M1},
		{"bf16-mixed+nvfp4", dtype.E2M1},
		{"bf16-mixed+fp8-block", dtype.E4M3FN},
	} {
		runs := map[string][]gptRun{}
		for name, with := range map[string]func(*fabric.Config){
			"ddp":  func(*fabric.Config) {},
			"fsdp": func(*fabric.Config) {},
			// Checkpointed blocks read the forward's cast again in backward.
			"fsdp, checkpointed": func(fc *fabric.Config) { fc.ActivationCheckpointing = []string{"blocks.*"} },
			// Units kept from forward to backward gather both casts at once.
			"fsdp, kept after forward": func(fc *fabric.Config) { fc.Sharding.KeepAfterForward = true },
		} {
			st, _, _ := strings.Cut(name, ",")
			runs[name] = make([]gptRun, 3)
			onRanks(t, 3, func(r int, cm comm.Communicator) (err error) {
				runs[name][r], err = trainGPT(t, c.spec, st, cm, false, 3, with)
				return err
			})
		}
		for name, run := range runs {
			for r := range 3 {
				if d := sameRun(run[r], runs["ddp"][r]); d != "" {
					t.Errorf("%s rank %d: %s and ddp differ: %s", c.spec, r, name, d)
				}
				if g := run[r].gathered; name != "ddp" && g[c.code] == 0 {
					t.Errorf("%s rank %d: %s gathered %v bytes, none of them %s codes", c.spec, r, name, g, c.code)
				}
			}
		}
		got, want := sent(runs["fsdp"][0]), sent(bf16[0])
		t.Logf("%s: fsdp rank 0 sent %d bytes in all-gathers and all-reductions, %.2f of bf16-mixed's %d", c.spec, got, float64(got)/float64(want), want)
		if got >= want {
			t.Errorf("%s: fsdp rank 0 sent %d bytes in all-gathers and all-reductions, bf16-mixed %d: the codes save nothing", c.spec, got, want)
		}
	}
}

// TestPredictedGathersUnderLoRA: with LoRA adapters beside 8-bit AdamW
// state on 4 fsdp ranks, the plan's gathered bytes are those the strategy
// counts: the frozen bases are cut in whole state blocks as the trained
// parameters are (strategy.ParamBlock).
func TestPredictedGathersUnderLoRA(t *testing.T) {
	pol, _, err := precision.ParsePolicy("bf16-mixed+adamw8bit", nil, "auto", precision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lora := precision.SpecFunc("lora", func() precision.Plugin { return quant.NewLoRA(4, 8, "blocks.*.qkv") })
	if pol.Default, err = precision.Join(pol.Default, lora); err != nil {
		t.Fatal(err)
	}
	p, err := fabric.MakePlan(models.NewGPT(nn.Meta(3), models.ReferenceGPT), pol, precision.LossScalingAuto, "fsdp", 4)
	if err != nil {
		t.Fatal(err)
	}
	p.PredictTraffic(4, false)
	var want int64
	for _, g := range p.Traffic.Gathers {
		want += g.Bytes
	}
	onRanks(t, 4, func(r int, cm comm.Communicator) error {
		cfg, b := gptBatch(false)
		f, err := fabric.New(fabric.Config{Policy: pol, Seed: 3, Strategy: "fsdp", Comm: cm})
		if err != nil {
			return err
		}
		m := models.NewGPT(f.InitModule(false), cfg)
		opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
		if err != nil {
			return err
		}
		if err := f.Setup(m, opt); err != nil {
			return err
		}
		if _, err := f.TrainStep(context.Background(), m, rankShare(t, f, b)); err != nil {
			return err
		}
		var sent int64
		for _, n := range f.Rank().Gathered() {
			sent += n * 3 // to each of 3 peers
		}
		if sent != want {
			t.Errorf("rank %d: the strategy gathered %d bytes, the plan predicts %d", r, sent, want)
		}
		return nil
	})
}

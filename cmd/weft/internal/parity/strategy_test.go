package parity

import (
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/strategy"
)

// TestParityStrategies: every strategy on 2 and 4 in-process ranks, the
// global batch split evenly, replays the single-device 64-true trajectory
// of every model to 1e-9.
func TestParityStrategies(t *testing.T) {
	ref, traj := loadReference(t)
	spec := mustSpec(t, "64-true")
	for _, model := range traj.ModelNames() {
		steps := traj.Models[model].Steps
		single, err := TrainOn(ref, model, steps, spec, Dist{Strategy: "single", Devices: 1, Backend: "local"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range []string{"ddp", "zero1", "zero2", "fsdp"} {
			for _, n := range []int{2, 4} {
				t.Run(fmt.Sprintf("%s/%s/%d", model, st, n), func(t *testing.T) {
					t.Parallel()
					res, err := TrainOn(ref, model, steps, spec, Dist{Strategy: st, Devices: n, Backend: "local"}, nil)
					if err != nil {
						t.Fatal(err)
					}
					want := make([]*float64, len(single.Losses))
					for i, l := range single.Losses {
						v := float64(l)
						want[i] = &v
					}
					if err := compareLosses(res.Losses, want, Tolerance{1e-9, 1e-9}); err != nil {
						t.Error(err)
					}
					if len(res.Ranks) != n {
						t.Fatalf("%d rank reports", len(res.Ranks))
					}
					checkAccounting(t, res, st, n)
				})
			}
		}
	}
}

// checkAccounting: what each rank holds is the ZeRO formula: a sharded
// tensor of n elements costs ceil(n/N) elements per rank, a replicated one
// n; AdamW state is two tensors per parameter.
func checkAccounting(t *testing.T, res *Result, st string, n int) {
	t.Helper()
	info, _ := strategy.Lookup(st)
	var params, grads, optim int64
	for _, p := range res.Params {
		full := int64(p.Var.Value.Bytes())
		per := int64(strategy.PerRank(int64(p.Var.Value.Len()), true, n)) * full / int64(p.Var.Value.Len())
		pick := func(sharded bool) int64 {
			if sharded {
				return per
			}
			return full
		}
		params += pick(info.Sharding.Parameters)
		grads += pick(info.Sharding.Gradients)
		optim += 2 * pick(info.Sharding.OptimizerState)
	}
	for _, r := range res.Ranks {
		if r.ParamBytes != params || r.GradBytes != grads || r.OptimizerBytes != optim {
			t.Errorf("rank %d holds params %d, grads %d, optimizer %d bytes; the %s formula gives %d, %d, %d",
				r.Rank, r.ParamBytes, r.GradBytes, r.OptimizerBytes, st, params, grads, optim)
		}
	}
}

// TestFP8ScalesAgreeAcrossRanks: with amaxes reduced over ranks, every
// rank of an FP8 run ends with the same scales and histories although each
// saw its own share of the batch.
func TestFP8ScalesAgreeAcrossRanks(t *testing.T) {
	ref, _ := loadReference(t)
	spec, plugins := recording(mustSpec(t, "bf16-mixed+fp8"))
	if _, err := TrainOn(ref, "mlp", 5, spec, Dist{Strategy: "ddp", Devices: 2, Backend: "local"}, nil); err != nil {
		t.Fatal(err)
	}
	var states [][]byte
	for _, p := range *plugins {
		for _, st := range precision.States(p) {
			b, err := st.MarshalState()
			if err != nil {
				t.Fatal(err)
			}
			states = append(states, b)
		}
	}
	if len(states) != 2 || string(states[0]) != string(states[1]) {
		t.Fatalf("the ranks' FP8 states differ (%d states)", len(states))
	}
}

// TestFP8Gathers: FSDP with transformer-engine (Lightning refuses it)
// gathers each FP8 Linear's weight as one byte per element plus a float32
// scale per rank, and every other parameter in its storage dtype (bf16):
// twice a step, before each unit's forward and again before its backward,
// or once when the units keep their parameters from forward to backward.
func TestFP8Gathers(t *testing.T) {
	ref, _ := loadReference(t)
	const steps, ranks = 3, 2
	for _, keep := range []bool{false, true} {
		d := Dist{Strategy: "fsdp", Devices: ranks, Backend: "local", Options: strategy.Options{KeepAfterForward: keep}}
		res, err := TrainOn(ref, "mlp", steps, mustSpec(t, "transformer-engine"), d, nil)
		if err != nil {
			t.Fatal(err)
		}
		// mlp: fc1 [64,32] and fc2 [64,64] pass the FP8 filter; head [10,64] does not.
		var fp8, scales, bf16 int64
		for _, p := range res.Params {
			chunk := int64(strategy.PerRank(int64(p.Var.Value.Len()), true, ranks))
			switch p.Path {
			case "fc1.weight", "fc2.weight":
				fp8, scales = fp8+chunk, scales+4
			default:
				bf16 += 2 * chunk
			}
		}
		gathers := int64(2 * steps)
		if keep {
			gathers = steps
		}
		for _, r := range res.Ranks {
			g := r.Gathered
			if g["float8_e4m3fn"] != gathers*fp8 || g["float32"] != gathers*scales || g["bfloat16"] != gathers*bf16 {
				t.Errorf("keep after forward %v: rank %d gathered %v; want float8_e4m3fn %d, float32 %d, bfloat16 %d", keep, r.Rank, g, gathers*fp8, gathers*scales, gathers*bf16)
			}
		}
	}
}

// recording is base, keeping every plugin it makes (one per rank, each
// made on the rank's goroutine) in the returned slice.
func recording(base precision.Spec) (precision.Spec, *[]precision.Plugin) {
	var (
		mu      sync.Mutex
		plugins []precision.Plugin
	)
	return precision.SpecFunc(base.String(), func() precision.Plugin {
		p, _ := base.New()
		mu.Lock()
		defer mu.Unlock()
		plugins = append(plugins, p)
		return p
	}), &plugins
}

func mustSpec(t *testing.T, spec string) precision.Spec {
	t.Helper()
	s, err := precision.ParseSpec(spec, precision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestParityQuantizedFSDP: a gpt whose Linears nf4 replaced (their weight
// gone from the Linear, held as codes) trains under fsdp on 2 ranks as on
// one device, and each rank reports the qkv codes it holds: half a byte
// per weight plus block constants, far under the bfloat16 weight's 2.
func TestParityQuantizedFSDP(t *testing.T) {
	ref, _ := loadReference(t)
	spec := mustSpec(t, "bf16-true+nf4-dq")
	single, err := TrainOn(ref, "gpt", 2, spec, Dist{Strategy: "single", Devices: 1, Backend: "local"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := TrainOn(ref, "gpt", 2, spec, Dist{Strategy: "fsdp", Devices: 2, Backend: "local"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range res.Losses {
		if d := math.Abs(float64(l - single.Losses[i])); d > 1e-3*math.Abs(float64(single.Losses[i])) {
			t.Errorf("step %d: fsdp loss %v, one device %v", i, l, single.Losses[i])
		}
	}
	const weights = 3 * 32 * 32 // the reference gpt's qkv: width 32 to 96
	for _, r := range res.Ranks {
		if r.QKVBytes < weights/2 || r.QKVBytes >= weights*2/3 {
			t.Errorf("rank %d reports %d bytes of qkv; nf4-dq holds %d weights in %d to %d", r.Rank, r.QKVBytes, weights, weights/2, weights*2/3)
		}
	}
}

package fabric_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/weftml/weft/data"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/quant"
	"github.com/weftml/weft/tensor"
)

// planPrecisions are the specs the meta plan is checked against training in.
var planPrecisions = []string{"32-true", "bf16-true", "bf16-mixed", "transformer-engine", "transformer-engine(fallback=float32,replace_layers=false)", "bf16-true+nf4-dq",
	"nf4", "fp4-dq", "int8", "int8-training", "fp8-mx"}

// tinyBatch is a batch of two rows for each reference model.
func tinyBatch(model string) data.Batch {
	image := func(shape ...int) *tensor.Tensor {
		vals := make([]float32, tensor.Numel(shape))
		for i := range vals {
			vals[i] = float32(i%7) - 3
		}
		return tensor.FromFloat32(vals, shape...)
	}
	tokens := func(vocab int) data.Batch {
		b := data.Batch{Shape: []int{2, 4}}
		for i := range 8 {
			b.Tokens, b.Targets = append(b.Tokens, i*5%vocab), append(b.Targets, (i*3+1)%vocab)
		}
		return b
	}
	switch model {
	case "mlp":
		return data.Batch{X: image(2, 32), Targets: []int{1, 2}}
	case "mlp784":
		return data.Batch{X: image(2, 784), Targets: []int{1, 2}}
	case "cnn":
		return data.Batch{X: image(2, 1, 12, 12), Targets: []int{1, 2}}
	case "gpt":
		return tokens(models.ReferenceGPT.Vocab)
	case "llama":
		return tokens(models.ReferenceLlama.Vocab)
	}
	b := tokens(models.DefaultHybrid.Decoder.Vocab) // hybrid
	b.X = image(2, 1, models.DefaultHybrid.Height, models.DefaultHybrid.Width)
	return b
}

// measured is what one module of a model set up for training holds.
type measured struct{ params, frozen, grads, state int64 }

// trainOneStep sets up a model with weights for pol, trains one step and
// measures every module: its parameters and frozen weights after the
// conversion, its gradients after backward and its AdamW state after the
// step.
func trainOneStep(t *testing.T, model string, pol precision.Policy) map[string]measured {
	m, err := models.New(model, 1)
	if err != nil {
		t.Fatal(err)
	}
	f, opt, err := setUp(t, m, pol, nil)
	if err != nil {
		t.Fatal(err)
	}
	fabricLoss(t, f, m, tinyBatch(model))
	out := map[string]measured{}
	nn.Walk(m, func(path string, mod nn.Module) {
		var got measured
		for _, p := range mod.Params() {
			got.params += int64(p.Var.Value.Bytes())
			if p.Var.Grad != nil {
				got.grads += int64(p.Var.Grad.Bytes())
			}
		}
		if l, ok := mod.(*nn.Linear); ok {
			if w, ok := quant.WeightOf(l); ok {
				got.frozen = int64(w.Bytes())
			}
		}
		out[path] = got
	})
	if _, err := f.Step(); err != nil {
		t.Fatal(err)
	}
	nn.Walk(m, func(path string, mod nn.Module) {
		got := out[path]
		for _, p := range mod.Params() {
			if st := opt.State(nn.Join(path, p.Name)); st != nil {
				got.state += int64(st.ExpAvg.Bytes() + st.ExpAvgSq.Bytes())
			}
		}
		out[path] = got
	})
	return out
}

// TestMetaPlanMatchesTraining plans every reference model on shapes alone
// in each precision and trains the same model with weights one step:
// every module's parameter, frozen-weight, gradient and optimizer-state
// bytes in the plan are those measured, and the meta model keeps no
// storage.
func TestMetaPlanMatchesTraining(t *testing.T) {
	for _, model := range models.Names() {
		for _, spec := range planPrecisions {
			t.Run(model+"/"+spec, func(t *testing.T) {
				sp, err := precision.ParseSpec(spec, precision.Options{})
				if err != nil {
					t.Fatal(err)
				}
				pol := precision.Policy{Default: sp}
				meta, err := models.NewMeta(model, 0)
				if err != nil {
					t.Fatal(err)
				}
				plan, err := fabric.MakePlan(meta, pol, precision.LossScalingAuto, "single", 1)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range nn.Parameters(meta) {
					if !p.Var.Value.IsMeta() {
						t.Errorf("planning gave %s storage", p.Path)
					}
				}
				real := trainOneStep(t, model, pol)
				var total int64
				for _, mp := range plan.Modules {
					got, b := real[mp.Path], mp.BytesPerRank
					if want := (measured{b.Params, b.Frozen, b.Grads, b.OptimizerState}); got != want {
						t.Errorf("%s: planned params/frozen/grads/state %v bytes, training holds %v", mp.Path, want, got)
					}
					total += got.params + got.frozen
				}
				if b := plan.BytesPerRank; b.Params+b.Frozen != total {
					t.Errorf("plan total %d bytes, training %d", b.Params+b.Frozen, total)
				}
			})
		}
	}
}

// TestPlanShowsConversions: a plan names the plugin that replaced each
// Linear's arithmetic, shows quantized weights in their packed format and
// FP8 weights gathered in FP8 under FSDP.
func TestPlanShowsConversions(t *testing.T) {
	plan := func(model, spec, strat string, devices int) map[string]fabric.ModulePlan {
		sp, err := precision.ParseSpec(spec, precision.Options{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := models.NewMeta(model, 0)
		if err != nil {
			t.Fatal(err)
		}
		p, err := fabric.MakePlan(m, precision.Policy{Default: sp}, precision.LossScalingAuto, strat, devices)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]fabric.ModulePlan{}
		for _, mp := range p.Modules {
			out[mp.Path] = mp
		}
		return out
	}
	for _, c := range []struct {
		model, spec, strat string
		devices            int
		path               string
		want               fabric.ModulePlan // the fields compared
	}{
		{"mlp784", "bf16-true+nf4-dq", "single", 1, "fc1", fabric.ModulePlan{Converted: "nf4-dq (weight frozen)", Storage: "nf4-dq(packed)/bfloat16", Params: 1024, Frozen: 784 * 1024, Communication: "bfloat16"}},
		{"mlp784", "bf16-true+nf4-dq", "single", 1, "head", fabric.ModulePlan{Storage: "bfloat16", Params: 10250, Communication: "bfloat16"}},
		{"mlp", "int8", "fsdp", 2, "fc2", fabric.ModulePlan{Converted: "int8 (weight frozen)", Storage: "int8/float32", Params: 64, Frozen: 64 * 64, Communication: "float32"}},
		{"mlp", "int8-training", "single", 1, "fc2", fabric.ModulePlan{Converted: "int8-training GEMMs", Storage: "float32", Params: 64*64 + 64, Communication: "float32"}},
		{"gpt", "transformer-engine", "fsdp", 2, "blocks.0.fc", fabric.ModulePlan{Converted: "fp8 GEMMs", Storage: "bfloat16", Params: 32*128 + 128, Communication: "float8_e4m3fn/bfloat16"}},
		{"gpt", "transformer-engine", "ddp", 2, "blocks.0.fc", fabric.ModulePlan{Converted: "fp8 GEMMs", Storage: "bfloat16", Params: 32*128 + 128, Communication: "bfloat16"}},
		{"cnn", "transformer-engine", "fsdp", 2, "head", fabric.ModulePlan{Storage: "bfloat16", Params: 5770, Communication: "bfloat16"}},
	} {
		got := plan(c.model, c.spec, c.strat, c.devices)[c.path]
		got = fabric.ModulePlan{Converted: got.Converted, Storage: got.Storage, Params: got.Params, Frozen: got.Frozen, Communication: got.Communication}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s %s on %s×%d, %s: %+v, want %+v", c.model, c.spec, c.strat, c.devices, c.path, got, c.want)
		}
	}
}

// refusals are policies training refuses: conflicts found while parsing
// are not among them, as neither a plan nor a setup ever sees one.
var refusals = []struct {
	model, spec string
	rules       []string
	lossScale   string
	conflict    bool // a *ConflictError
}{
	{"gpt", "nf4-dq+nf4", nil, "", true},
	{"mlp", "int8+fp4", nil, "", true},
	{"mlp", "fp8+fp8-current", nil, "", true},
	{"gpt", "int8-training+fp8", nil, "", true},
	{"mlp", "fp8+nf4", nil, "", true},
	{"hybrid", "32-true", []string{"vision.**=16-mixed", "decoder.**=16-mixed"}, "", true},
	{"hybrid", "bf16-true", []string{"vision.*=16-mixed", "*.conv1=bf16-mixed"}, "", false},
	{"hybrid", "32-true", []string{"vision.**=16-mixed"}, "none", false},
	{"hybrid", "32-true", []string{"nothere.**=16-mixed"}, "", false},
	{"hybrid", "32-true", []string{"kind:Conv3d=bf16-true"}, "", false},
	{"cnn", "bf16-true", []string{"head=fp8"}, "", false},
	{"hybrid", "bf16-true", []string{"kind:Conv2d=fp8"}, "", false},
	{"gpt", "32-true", []string{"head=nf4"}, "", false},
	{"gpt", "32-true", []string{"blocks.**=nf4-dq+int8"}, "", true},
}

// TestPlanRefusesWhatTrainingRefuses runs every refused policy through
// MakePlan (on a meta model) and through Setup (on a model with weights
// and an optimizer): both fail, with the same error word for word.
func TestPlanRefusesWhatTrainingRefuses(t *testing.T) {
	for _, c := range refusals {
		t.Run(fmt.Sprint(c.model, " ", c.spec, c.rules, c.lossScale), func(t *testing.T) {
			pol, scaling, err := precision.ParsePolicy(c.spec, c.rules, c.lossScale, precision.Options{})
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			meta, _ := models.NewMeta(c.model, 0)
			_, planErr := fabric.MakePlan(meta, pol, scaling, "single", 1)
			m, _ := models.New(c.model, 1)
			opt, _ := optim.NewAdamW(nn.Parameters(m), adamW)
			setupErr := newFabric(t, fabric.Config{Policy: pol, LossScaling: scaling}).Setup(m, opt)
			if planErr == nil || setupErr == nil {
				t.Fatalf("plan error %v, setup error %v: want both to refuse", planErr, setupErr)
			}
			if planErr.Error() != setupErr.Error() {
				t.Errorf("plan says %q, training %q", planErr, setupErr)
			}
			var conflict *precision.ConflictError
			if got := errors.As(planErr, &conflict); got != c.conflict || errors.As(setupErr, &conflict) != c.conflict {
				t.Errorf("%v: a ConflictError %v, want %v", planErr, got, c.conflict)
			}
			t.Log(planErr)
		})
	}
}

// TestPlanWarnings: a converter of the whole model that converts nothing,
// or leaves some Linears as they were, is a warning in the plan and in the
// training setup's resolution alike; one that converts everything it can
// is silent.
func TestPlanWarnings(t *testing.T) {
	for _, c := range []struct {
		model, spec string
		want        []string
	}{
		{"cnn", "transformer-engine", []string{"fp8 converted no Linear: head is 576→10, FP8 needs in%8==0 and out%16==0; the run goes on without it"}},
		{"mlp", "fp8", []string{"fp8 left 1 Linear(s) as they were: head is 64→10, FP8 needs in%8==0 and out%16==0"}},
		{"gpt", "nf4-dq", []string{`nf4-dq left 1 Linear(s) as they were: head is skipped: Skip pattern "head" keeps it in float`}},
		{"gpt", "fp8", nil},
		{"gpt", "bf16-mixed", nil},
	} {
		sp, err := precision.ParseSpec(c.spec, precision.Options{})
		if err != nil {
			t.Fatal(err)
		}
		pol := precision.Policy{Default: sp}
		meta, _ := models.NewMeta(c.model, 0)
		plan, err := fabric.MakePlan(meta, pol, precision.LossScalingAuto, "single", 1)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := models.New(c.model, 1)
		opt, _ := optim.NewAdamW(nn.Parameters(m), adamW)
		f := newFabric(t, fabric.Config{Policy: pol})
		if err := f.Setup(m, opt); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(plan.Warnings) != fmt.Sprint(c.want) || fmt.Sprint(f.Resolution().Warnings) != fmt.Sprint(c.want) {
			t.Errorf("%s %s: plan warns %q, setup %q; want %q", c.model, c.spec, plan.Warnings, f.Resolution().Warnings, c.want)
		}
	}
}

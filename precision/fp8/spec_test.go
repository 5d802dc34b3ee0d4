package fp8_test

import (
	"testing"

	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/fp8"
)

var (
	_ precision.ModuleConverter = (*fp8.Delayed)(nil)
	_ precision.Stateful        = (*fp8.Delayed)(nil)
	_ precision.ModuleConverter = (*fp8.Current)(nil)
	_ precision.ModuleConverter = (*fp8.MX)(nil)
)

func parse(t *testing.T, spec string) precision.Plugin {
	t.Helper()
	p, err := precision.Parse(spec, precision.Options{})
	if err != nil {
		t.Fatalf("Parse(%q): %v", spec, err)
	}
	return p
}

// TestSpecs checks the FP8 spec strings: what they compose, that the
// compositions are valid ones, and that FP8 claims no exclusive role.
func TestSpecs(t *testing.T) {
	for _, c := range []struct{ spec, name string }{
		{"fp8", "fp8"},
		{"fp8-current", "fp8-current"},
		{"fp8-mx", "fp8-mx"},
		{"transformer-engine", "bf16-true+fp8"},
		{"transformer-engine-float16", "16-true+fp8"},
		{"bf16-fp8", "bf16-mixed+fp8"},
		{"bf16-mixed+fp8-current", "bf16-mixed+fp8-current"},
		{"16-mixed+fp8-mx", "16-mixed+fp8-mx"},
		{"64-true+fp8", "64-true+fp8"},
	} {
		p := parse(t, c.spec)
		if p.Name() != c.name {
			t.Errorf("Parse(%q).Name() = %q, want %q", c.spec, p.Name(), c.name)
		}
		if _, err := precision.Compose(precision.Members(p)...); err != nil {
			t.Errorf("%s: its members do not compose: %v", c.spec, err)
		}
	}
	for _, spec := range []string{"fp8", "fp8-current", "fp8-mx"} {
		p := parse(t, spec)
		_, storage := precision.StorageDType(p)
		_, in := precision.InputDType(p)
		_, out := precision.OutputDType(p)
		_, state := precision.OptimizerStateDType(p)
		if storage || in || out || state || precision.Autocast(p) != nil || precision.ScalesLoss(p) {
			t.Errorf("%s claims an exclusive role (storage %v, input %v, output %v, optimizer state %v, autocast %v, loss scaling %v)",
				spec, storage, in, out, state, precision.Autocast(p) != nil, precision.ScalesLoss(p))
		}
	}
}

// TestSpecFreshState checks that every Parse builds its own state.
func TestSpecFreshState(t *testing.T) {
	used := parse(t, "transformer-engine")
	m := models.NewMLP(nn.NewInit(1))
	if err := precision.ConvertModule(used, m); err != nil {
		t.Fatal(err)
	}
	if m.FC1.GEMM == nil {
		t.Fatal("transformer-engine left fc1 unconverted")
	}
	b, err := precision.States(used)["fp8"].MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	if string(b) == "{}" {
		t.Fatal("converting a model left no fp8 state")
	}
	fresh, err := precision.States(parse(t, "transformer-engine"))["fp8"].MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	if string(fresh) != "{}" {
		t.Errorf("a fresh Parse has state %s, want {}", fresh)
	}
}

// TestPolicyScope checks that FP8 reaches only the modules a policy gives
// it: fc2 here, under a bf16-mixed default.
func TestPolicyScope(t *testing.T) {
	m := models.NewMLP(nn.NewInit(1))
	rule, err := precision.ParseRule("fc2=bf16-mixed+fp8", precision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pol := precision.Policy{Default: precision.Once(parse(t, "bf16-mixed")), Rules: []precision.Rule{rule}}
	res, err := pol.Resolve(m, precision.LossScalingAuto)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Convert(); err != nil {
		t.Fatal(err)
	}
	if m.FC1.GEMM != nil || m.FC2.GEMM == nil {
		t.Errorf("fc1 converted %v, fc2 converted %v; want only fc2", m.FC1.GEMM != nil, m.FC2.GEMM != nil)
	}
}

package precision_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
)

func parseSpec(t *testing.T, spec string) precision.Spec {
	t.Helper()
	p, err := precision.ParseSpec(spec, precision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func parsePlugin(t *testing.T, spec string) precision.Plugin {
	t.Helper()
	p, err := precision.Parse(spec, precision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func hybridPolicy(t *testing.T, root string, rules ...string) precision.Policy {
	t.Helper()
	pol := precision.Policy{Default: parseSpec(t, root)}
	for _, r := range rules {
		rule, err := precision.ParseRule(r, precision.Options{})
		if err != nil {
			t.Fatal(err)
		}
		pol.Rules = append(pol.Rules, rule)
	}
	return pol
}

func scopeOf(t *testing.T, res *precision.Resolution, path string) precision.Scope {
	t.Helper()
	for _, s := range res.Scopes {
		if s.Path == path {
			return s
		}
	}
	t.Fatalf("no module %q", path)
	return precision.Scope{}
}

func TestPolicyResolve(t *testing.T) {
	m := models.NewHybrid(nn.NewInit(1), models.DefaultHybrid)
	tests := []struct {
		rules []string
		want  map[string]string // module path -> plugin name
	}{
		{nil, map[string]string{"": "bf16-true", "vision.conv1": "bf16-true"}},
		{[]string{"vision.**=16-mixed"}, map[string]string{"vision": "16-mixed", "vision.conv2": "16-mixed", "decoder.head": "bf16-true"}},
		{[]string{"vision=16-mixed"}, map[string]string{"vision.proj": "16-mixed", "decoder": "bf16-true"}}, // inherited
		{[]string{"kind:Conv2d=16-mixed"}, map[string]string{"vision.conv1": "16-mixed", "vision.proj": "bf16-true"}},
		{[]string{"vision.**=16-mixed", "vision.proj=32-true"}, map[string]string{"vision.conv1": "16-mixed", "vision.proj": "32-true"}},
		{[]string{"decoder.blocks.*.fc=bf16-mixed"}, map[string]string{"decoder.blocks.1.fc": "bf16-mixed", "decoder.blocks.1.out": "bf16-true"}},
		{[]string{"kind:Linear=32-true", "decoder.**=bf16-mixed"}, map[string]string{"decoder.head": "bf16-mixed", "vision.proj": "32-true"}},
	}
	for _, tt := range tests {
		res, err := hybridPolicy(t, "bf16-true", tt.rules...).Resolve(m, precision.LossScalingAuto)
		if err != nil {
			t.Fatalf("%v: %v", tt.rules, err)
		}
		for path, want := range tt.want {
			if got := scopeOf(t, res, path).Plugin.Name(); got != want {
				t.Errorf("%v: %s gets %s, want %s", tt.rules, path, got, want)
			}
		}
	}
}

func TestPolicyAmbiguous(t *testing.T) {
	m := models.NewHybrid(nn.NewInit(1), models.DefaultHybrid)
	_, err := hybridPolicy(t, "32-true", "vision.*=16-mixed", "*.conv1=bf16-mixed").Resolve(m, precision.LossScalingAuto)
	if err == nil || !strings.Contains(err.Error(), "vision.conv1") || !strings.Contains(err.Error(), "equally") {
		t.Fatalf("want an ambiguity error naming vision.conv1, got %v", err)
	}
}

func TestPolicyLossScalingIsGlobal(t *testing.T) {
	m := models.NewHybrid(nn.NewInit(1), models.DefaultHybrid)
	res, err := hybridPolicy(t, "bf16-true", "vision.**=16-mixed").Resolve(m, precision.LossScalingAuto)
	if err != nil || !res.ScalesLoss() || res.Scaler.Scale() != 65536 {
		t.Fatalf("16-mixed vision must give the model one scaler: %v %v", res, err)
	}
	// f16 autocast without a scaler of its own still gets one ...
	res, err = hybridPolicy(t, "32-true", "decoder.**=params=float32,compute=float16,output=float32").Resolve(m, precision.LossScalingAuto)
	if err != nil || !res.ScalesLoss() {
		t.Fatalf("float16 compute must get a dynamic scaler: %v", err)
	}
	// ... unless refused, which is an error that says why.
	_, err = hybridPolicy(t, "32-true", "decoder.**=params=float32,compute=float16,output=float32").Resolve(m, precision.NoLossScaling)
	if err == nil || !strings.Contains(err.Error(), "float16") {
		t.Fatalf("--loss-scale none with float16 compute: got %v", err)
	}
	// Two 16-mixed rules are two scalers for one model.
	_, err = hybridPolicy(t, "32-true", "vision.**=16-mixed", "decoder.**=16-mixed").Resolve(m, precision.LossScalingAuto)
	var conflict *precision.ConflictError
	if !errors.As(err, &conflict) || conflict.Role != "loss scaling" {
		t.Fatalf("two scalers: got %v", err)
	}
	// bf16 alone needs none.
	res, err = hybridPolicy(t, "bf16-mixed").Resolve(m, precision.LossScalingAuto)
	if err != nil || res.ScalesLoss() {
		t.Fatalf("bf16-mixed must not scale: %v", err)
	}
}

func TestComposeConflicts(t *testing.T) {
	for spec, role := range map[string]string{
		"16-mixed+bf16-mixed": "compute (autocast)",
		"16-mixed+16-mixed":   "loss scaling",
		"bf16-true+16-true":   "storage",
		"bf16-true+16-mixed":  "input casting",
	} {
		_, err := precision.Parse(spec, precision.Options{})
		var conflict *precision.ConflictError
		if !errors.As(err, &conflict) || conflict.Role != role {
			t.Errorf("%s: want a conflict on %s, got %v", spec, role, err)
			continue
		}
		for _, name := range strings.Split(spec, "+") {
			if !strings.Contains(err.Error(), name) {
				t.Errorf("%s: error %q does not name %s", spec, err, name)
			}
		}
	}
}

func TestComposeRoles(t *testing.T) {
	p := parsePlugin(t, "bf16-true+bf16-mixed")
	if p.Name() != "bf16-true+bf16-mixed" || len(precision.Members(p)) != 2 {
		t.Fatalf("composition %q has members %v", p.Name(), precision.Members(p))
	}
	if dt, ok := precision.StorageDType(p); !ok || dt != dtype.BF16 {
		t.Errorf("storage from bf16-true: %v %v", dt, ok)
	}
	if a := precision.Autocast(p); a == nil || a.CastInput(autograd.OpLayerNorm, dtype.BF16) != dtype.F32 {
		t.Errorf("compute from bf16-mixed: layer_norm must run in float32")
	}
	// Nested compositions flatten, so a claim inside one is seen.
	if r, err := precision.Compose(parsePlugin(t, "bf16-mixed"), p); err == nil {
		t.Fatalf("bf16-mixed twice claims compute twice, got %s", r.Name())
	}
}

func TestParseJMP(t *testing.T) {
	p, err := precision.ParseJMP("params=float32,compute=bfloat16,output=float32")
	if err != nil {
		t.Fatal(err)
	}
	if p.CastInput(autograd.OpLayerNorm, dtype.F32) != dtype.BF16 || p.StorageDType() != dtype.F32 || p.OutputDType() != dtype.F32 {
		t.Fatalf("jmp policy %+v", p)
	}
	for _, bad := range []string{"params=int8", "weights=float32", "compute"} {
		if _, err := precision.ParseJMP(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

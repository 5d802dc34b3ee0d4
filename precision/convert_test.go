package precision_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
)

// listed is a converter that reports its declines: it replaces the GEMM
// of the Linears whose paths it lists and declines the others.
type listed struct {
	name  string
	paths []string
}

func (p *listed) Name() string { return p.name }
func (p *listed) ConvertModule(path string, m nn.Module) error {
	l, ok := m.(*nn.Linear)
	if !ok || !slices.Contains(p.paths, path) {
		return nil
	}
	if l.GEMM != nil {
		return fmt.Errorf("%s: %w", p.name, nn.ErrGEMMReplaced)
	}
	l.GEMM = stubGEMM{}
	return nil
}
func (p *listed) Declined(path string) (string, bool) {
	return "is not on the list", !slices.Contains(p.paths, path) && (path == "fc1" || path == "fc2" || path == "head")
}

// silent converts like listed but reports nothing: Convert expects
// nothing of it.
type silent struct{ listed }

func (p *silent) Declined() {} // not the role's method

// failing fails on every Linear with an error that is no replacement.
type failing struct{}

func (failing) Name() string { return "failing" }
func (failing) ConvertModule(_ string, m nn.Module) error {
	if _, ok := m.(*nn.Linear); ok {
		return errors.New("failing: no")
	}
	return nil
}

type stubGEMM struct{}

func (stubGEMM) Linear(tp *autograd.Tape, x, w, b *autograd.Var) *autograd.Var {
	return tp.Linear(x, w, b)
}

var (
	_ precision.ConversionReporter = (*listed)(nil)
	_ precision.ModuleConverter    = (*silent)(nil)
	_ precision.ModuleConverter    = failing{}
)

func listedSpec(name string, paths ...string) precision.Spec {
	return precision.SpecFunc(name, func() precision.Plugin { return &listed{name: name, paths: paths} })
}

// TestConvertHoldsReportersToPurpose: over the MLP (Linears fc1, fc2 and
// head), a reporting converter of the whole model that converts nothing
// is a warning, one a rule brings in an error, one that declines some a
// warning listing them; a converter that does not report is held to
// nothing; two replacing one Linear are a conflict naming both.
func TestConvertHoldsReportersToPurpose(t *testing.T) {
	for _, c := range []struct {
		name     string
		pol      precision.Policy
		warnings []string
		err      string
		conflict bool
	}{
		{"default converts all", precision.Policy{Default: listedSpec("all", "fc1", "fc2", "head")}, nil, "", false},
		{"default converts none", precision.Policy{Default: listedSpec("none")},
			[]string{"none converted no Linear: fc1 is not on the list; fc2 is not on the list; head is not on the list; the run goes on without it"}, "", false},
		{"default converts some", precision.Policy{Default: listedSpec("some", "fc1")},
			[]string{"some left 2 Linear(s) as they were: fc2 is not on the list; head is not on the list"}, "", false},
		{"rule converts none", precision.Policy{Rules: []precision.Rule{{Pattern: "head", Spec: listedSpec("none")}}},
			nil, `precision rule "head=none": none converted no Linear: head is not on the list`, false},
		{"rule converts elsewhere", precision.Policy{Rules: []precision.Rule{{Pattern: "fc1", Spec: listedSpec("other", "fc2")}}},
			nil, `precision rule "fc1=other": other converted no Linear: fc1 is not on the list`, false},
		{"rule over no Linear", precision.Policy{Rules: []precision.Rule{{Pattern: "kind:LayerNorm", Spec: listedSpec("any", "fc1")}}},
			nil, `precision rule "kind:LayerNorm=any": any converted no Linear: the modules it governs (norm) hold none`, false},
		{"rule converts part of what it matches", precision.Policy{Rules: []precision.Rule{{Pattern: "**", Spec: listedSpec("some", "fc1")}}},
			[]string{`precision rule "**=some": some left 2 Linear(s) as they were: fc2 is not on the list; head is not on the list`}, "", false},
		{"silent converts none", precision.Policy{Rules: []precision.Rule{{Pattern: "head", Spec: precision.SpecFunc("silent", func() precision.Plugin { return &silent{listed{name: "silent"}} })}}},
			nil, "", false},
		{"two replace fc1", precision.Policy{Default: mustJoin(t, listedSpec("a", "fc1"), listedSpec("b", "fc1"))},
			nil, "precision: role layer replacement claimed by a (module fc1) and b (module fc1)", true},
		{"another error", precision.Policy{Default: mustJoin(t, listedSpec("a", "fc1"), precision.SpecFunc("failing", func() precision.Plugin { return failing{} }))},
			nil, `precision: converting "fc1": failing: no`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := c.pol.Resolve(models.NewMLP(nn.Meta(0)), precision.LossScalingAuto)
			if err != nil {
				t.Fatal(err)
			}
			err = res.Convert()
			var conflict *precision.ConflictError
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("Convert: %v", err)
			case c.err != "" && (err == nil || err.Error() != c.err):
				t.Fatalf("Convert: %v, want %q", err, c.err)
			case errors.As(err, &conflict) != c.conflict:
				t.Fatalf("Convert: %v: a ConflictError %v, want %v", err, !c.conflict, c.conflict)
			}
			if err == nil && fmt.Sprint(res.Warnings) != fmt.Sprint(c.warnings) {
				t.Errorf("warnings %q, want %q", res.Warnings, c.warnings)
			}
		})
	}
}

// TestConvertRecordsConverters: each Scope names the members that
// replaced its module's arithmetic, in order, and only those.
func TestConvertRecordsConverters(t *testing.T) {
	pol := precision.Policy{Default: mustJoin(t, listedSpec("a", "fc1", "head"), parseSpec(t, "bf16-true"))}
	res, err := pol.Resolve(models.NewMLP(nn.Meta(0)), precision.LossScalingAuto)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Convert(); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]string{"fc1": {"a"}, "fc2": nil, "head": {"a"}, "norm": nil, "": nil} {
		if got := scopeOf(t, res, path).Converted; !slices.Equal(got, want) {
			t.Errorf("%q converted by %q, want %q", path, got, want)
		}
	}
}

func mustJoin(t *testing.T, specs ...precision.Spec) precision.Spec {
	t.Helper()
	s, err := precision.Join(specs...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRuleMatchingNothing: a rule that matches no module is an error in
// Resolve naming up to three module paths (or kinds) nearest its pattern.
func TestRuleMatchingNothing(t *testing.T) {
	m := models.NewHybrid(nn.Meta(0), models.DefaultHybrid)
	for rule, want := range map[string]string{
		"nothere.**=16-mixed":      `precision rule "nothere.**": matches no module; nearest: `,
		"vison.conv1=bf16-true":    `precision rule "vison.conv1": matches no module; nearest: vision.conv1, vision.conv2, `,
		"decoder.blocks.*.mlp=fp8": `precision rule "decoder.blocks.*.mlp": matches no module; nearest: decoder.blocks`,
		"kind:Conv3d=bf16-true":    `precision rule "kind:Conv3d": matches no module; nearest: kind:Conv2d, `,
		"decoder.blocks.2.fc=int8": `precision rule "decoder.blocks.2.fc": matches no module; nearest: decoder.blocks.0.fc, decoder.blocks.1.fc, `,
	} {
		_, err := hybridPolicy(t, "32-true", rule).Resolve(m, precision.LossScalingAuto)
		if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Count(err.Error(), ",") != 2 {
			t.Errorf("%s: %v, want %q and three suggestions", rule, err, want)
		}
	}
	// A rule that a more specific one overrides on all but one module matches.
	if _, err := hybridPolicy(t, "32-true", "vision.**=bf16-true", "vision.*=16-mixed").Resolve(m, precision.LossScalingAuto); err != nil {
		t.Errorf("rules that all match: %v", err)
	}
}

package precision_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/fp8"
	"github.com/weftml/weft/precision/quant"
)

// visits is a plugin of one's own that only converts: it notes the paths
// of the modules it governs, so it composes with any built-in plugin.
type visits struct{ paths []string }

func (*visits) Name() string { return "test-visits" }
func (v *visits) ConvertModule(path string, _ nn.Module) error {
	v.paths = append(v.paths, path)
	return nil
}

var _ precision.ModuleConverter = (*visits)(nil)

// Registered at init, so that the tests over every spec (conformance,
// the unknown-spec error) cover it too.
var _ = must(precision.Register("test-visits", func() precision.Plugin { return &visits{} }))

func must(err error) bool {
	if err != nil {
		panic(err)
	}
	return true
}

func TestRegisterReachable(t *testing.T) {
	if !slices.Contains(precision.Specs(), "test-visits") {
		t.Errorf("Specs() = %v, lacks the registered test-visits", precision.Specs())
	}
	_, err := precision.Parse("fp9", precision.Options{})
	if err == nil || !strings.Contains(err.Error(), "test-visits") {
		t.Errorf("the unknown-spec error does not list the registered name: %v", err)
	}
	sp, err := precision.ParseSpec("bf16-mixed+test-visits", precision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sp.String() != "bf16-mixed+test-visits" {
		t.Errorf("String() = %q, want bf16-mixed+test-visits", sp.String())
	}
	a, _ := sp.New()
	b, _ := sp.New()
	if got := names(a); !slices.Equal(got, []string{"bf16-mixed", "test-visits"}) {
		t.Errorf("members %v, want [bf16-mixed test-visits]", got)
	}
	m := models.NewMLP(nn.NewInit(1))
	if err := precision.ConvertModule(a, m); err != nil {
		t.Fatal(err)
	}
	va, vb := precision.Members(a)[1].(*visits), precision.Members(b)[1].(*visits)
	if !slices.Contains(va.paths, "fc1") || len(vb.paths) != 0 {
		t.Errorf("converted paths %v and, of a second New, %v; want fc1 among the first, none in the second", va.paths, vb.paths)
	}

	// A per-module rule reaches it too, and only the modules it names.
	pol, _, err := precision.ParsePolicy("bf16-mixed", []string{"fc2=test-visits"}, "auto", precision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := pol.Resolve(models.NewMLP(nn.NewInit(1)), precision.LossScalingAuto)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Convert(); err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Scopes {
		if v, ok := s.Plugin.(*visits); ok && !slices.Equal(v.paths, []string{"fc2"}) {
			t.Errorf("the rule's plugin governed %v, want [fc2]", v.paths)
		}
	}
}

func names(p precision.Plugin) []string {
	var out []string
	for _, m := range precision.Members(p) {
		out = append(out, m.Name())
	}
	return out
}

func TestRegisterRefuses(t *testing.T) {
	factory := func() precision.Plugin { return &visits{} }
	for _, c := range []struct{ name, want string }{
		{"test-visits", `precision: cannot register "test-visits": it is registered already`},
		{"fp8", `precision: cannot register "fp8": a built-in spec has that name`},
		{"bf16", `precision: cannot register "bf16": a built-in spec has that name`},
		{"", `precision: cannot register "": a spec name is letters, digits, '.', '_' and '-', starting with a letter or digit`},
		{"a+b", `precision: cannot register "a+b": a spec name is letters, digits, '.', '_' and '-', starting with a letter or digit`},
		{"a=b", `precision: cannot register "a=b": a spec name is letters, digits, '.', '_' and '-', starting with a letter or digit`},
		{"mine(x)", `precision: cannot register "mine(x)": a spec name is letters, digits, '.', '_' and '-', starting with a letter or digit`},
		{"my plugin", `precision: cannot register "my plugin": a spec name is letters, digits, '.', '_' and '-', starting with a letter or digit`},
		{"-mine", `precision: cannot register "-mine": a spec name is letters, digits, '.', '_' and '-', starting with a letter or digit`},
	} {
		if err := precision.Register(c.name, factory); err == nil || err.Error() != c.want {
			t.Errorf("Register(%q) = %v, want %s", c.name, err, c.want)
		}
	}
	if err := precision.Register("test-nil", nil); err == nil || err.Error() != `precision: cannot register "test-nil": the factory is nil` {
		t.Errorf("Register with a nil factory = %v", err)
	}
	if _, err := precision.ParseSpec("test-nil", precision.Options{}); err == nil {
		t.Error("a refused registration is reachable")
	}
}

var raceRound atomic.Int64 // a fresh name per run of the test (-count)

// TestRegisterConcurrent registers one name from many goroutines, parsing
// all the while: exactly one registration wins.
func TestRegisterConcurrent(t *testing.T) {
	name := fmt.Sprintf("test-race-%d", raceRound.Add(1))
	var wins atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if precision.Register(name, func() precision.Plugin { return &visits{} }) == nil {
				wins.Add(1)
			}
			precision.ParseSpec("bf16-mixed", precision.Options{})
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Errorf("%d registrations of %s succeeded, want 1", wins.Load(), name)
	}
	if _, err := precision.ParseSpec(name, precision.Options{}); err != nil {
		t.Error(err)
	}
}

func TestSpecArgs(t *testing.T) {
	delayed := func(t *testing.T, spec string) *fp8.Delayed {
		t.Helper()
		for _, m := range precision.Members(mustParse(t, spec, precision.Options{})) {
			if d, ok := m.(*fp8.Delayed); ok {
				return d
			}
		}
		t.Fatalf("%s has no fp8 member", spec)
		return nil
	}
	d := delayed(t, "fp8(margin=1,history=16,algo=most_recent,format=e4m3)")
	if d.Margin != 1 || d.HistoryLen != 16 || d.Algo != fp8.AmaxMostRecent || d.Format != fp8.E4M3 {
		t.Errorf("fields %d %d %v %v, want margin 1, history 16, most_recent, E4M3", d.Margin, d.HistoryLen, d.Algo, d.Format)
	}
	if d := delayed(t, "fp8(margin=3)"); d.Margin != 3 || d.HistoryLen != 1024 || d.Algo != fp8.AmaxMax || d.Format != fp8.Hybrid {
		t.Errorf("fp8(margin=3): %+v, want margin 3 and the other defaults", d)
	}
	if d := delayed(t, "transformer-engine(history=8)"); d.HistoryLen != 8 {
		t.Errorf("transformer-engine(history=8): history %d", d.HistoryLen)
	}
	if d := delayed(t, "bf16-mixed+fp8(algo=max)"); d.Algo != fp8.AmaxMax {
		t.Errorf("algo %v", d.Algo)
	}
	if p := mustParse(t, "fp8-current(format=e5m2)", precision.Options{}).(*fp8.Current); p.Format != fp8.E5M2 {
		t.Errorf("fp8-current(format=e5m2): format %v", p.Format)
	}
	if p := mustParse(t, "fp8-mx(format=hybrid)", precision.Options{}).(*fp8.MX); p.Format != fp8.Hybrid {
		t.Errorf("fp8-mx(format=hybrid): format %v", p.Format)
	}
	if p := mustParse(t, "nf4-dq(block=128)", precision.Options{}).(*quant.FourBit); p.BlockSize != 128 || !p.Double {
		t.Errorf("nf4-dq(block=128): block %d, double %v", p.BlockSize, p.Double)
	}
	if p := mustParse(t, "nf4(skip=none)", precision.Options{}).(*quant.FourBit); p.Skip != nil {
		t.Errorf("nf4(skip=none): skip %q", p.Skip)
	}
	if p := mustParse(t, "int8(threshold=4.5,skip=head|blocks.*.fc)", precision.Options{}).(*quant.Int8); p.Threshold != 4.5 || !slices.Equal(p.Skip, []string{"head", "blocks.*.fc"}) {
		t.Errorf("int8(threshold=4.5,skip=head|blocks.*.fc): threshold %v, skip %q", p.Threshold, p.Skip)
	}
	if p := mustParse(t, "int8-training", precision.Options{}).(*quant.Int8); p.Threshold != quant.DefaultThreshold || !slices.Equal(p.Skip, quant.DefaultSkip) {
		t.Errorf("int8-training: threshold %v, skip %q; want LLM.int8()'s 6 and %q", p.Threshold, p.Skip, quant.DefaultSkip)
	}
	for text, want := range map[string]string{
		"16-mixed(growth_interval=100, init_scale=1024)": "16-mixed(init_scale=1024,growth_interval=100)",
		"int8-training(skip= head | fc1 ,threshold=0)":   "int8-training(threshold=0,skip=head|fc1)",
		"bf16-true+nf4(skip=none,block=64)":              "bf16-true+nf4(block=64,skip=none)",
	} {
		if sp, err := precision.ParseSpec(text, precision.Options{}); err != nil || sp.String() != want {
			t.Errorf("ParseSpec(%s) = %q, %v; want %s", text, sp.String(), err, want)
		}
	}

	// Each New applies the arguments to a fresh plugin.
	sp, err := precision.ParseSpec("fp8(margin=2)", precision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := sp.New()
	b, _ := sp.New()
	if a == b || b.(*fp8.Delayed).Margin != 2 {
		t.Errorf("New returned one value twice (%v) or without the margin (%d)", a == b, b.(*fp8.Delayed).Margin)
	}

	// The arguments reach rules, and so --precision-for and a config's modules.
	rule, err := precision.ParseRule("blocks.*=bf16-mixed+fp8(margin=1,history=4)", precision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rule.Pattern != "blocks.*" || rule.Spec.String() != "bf16-mixed+fp8(margin=1,history=4)" {
		t.Errorf("rule %q = %q", rule.Pattern, rule.Spec.String())
	}
}

func TestSpecArgsConverted(t *testing.T) {
	m := models.NewMLP(nn.NewInit(1))
	if err := precision.ConvertModule(mustParse(t, "nf4(block=128)", precision.Options{}), m); err != nil {
		t.Fatal(err)
	}
	w, ok := quant.WeightOf(m.FC1)
	if !ok {
		t.Fatal("nf4 left fc1 unquantized")
	}
	if bw := w.(*quant.Blockwise); bw.BlockSize != 128 {
		t.Errorf("fc1 quantized in blocks of %d, want 128", bw.BlockSize)
	}
	// skip replaces the default (head): int8 quantizes the head and
	// leaves fc2 in float.
	m = models.NewMLP(nn.NewInit(1))
	p := mustParse(t, "int8(skip=fc2)", precision.Options{})
	if err := precision.ConvertModule(p, m); err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]*nn.Linear{"fc1": m.FC1, "fc2": m.FC2, "head": m.Head} {
		if _, quantized := quant.WeightOf(l); quantized != (name != "fc2") {
			t.Errorf("int8(skip=fc2): %s quantized %v", name, quantized)
		}
	}
}

// TestStochasticRound: bf16-true's stochastic_round reaches the
// StochasticRounder role, alone or composed; without it, or false, the
// parameters round to nearest.
func TestStochasticRound(t *testing.T) {
	for spec, want := range map[string]bool{
		"bf16-true(stochastic_round=true)":           true,
		"bf16-true(stochastic_round=true)+nf4":       true,
		"bf16-true(stochastic_round=false)":          false,
		"bf16-true":                                  false,
		"bf16-mixed":                                 false,
		"bf16-true(stochastic_round=true)+adamw8bit": true,
	} {
		if got := precision.RoundsStochastically(mustParse(t, spec, precision.Options{})); got != want {
			t.Errorf("%s: RoundsStochastically = %v, want %v", spec, got, want)
		}
	}
}

func TestSpecArgsBad(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{"fp8(bogus=1)", `precision "fp8(bogus=1)": unknown argument bogus; accepted: margin, history, algo, format`},
		{"fp8(margin=x)", `precision "fp8(margin=x)": margin=x: want an integer from 0 to 64`},
		{"fp8(margin=-1)", `precision "fp8(margin=-1)": margin=-1: want an integer from 0 to 64`},
		{"fp8(margin=65)", `precision "fp8(margin=65)": margin=65: want an integer from 0 to 64`},
		{"fp8(history=0)", `precision "fp8(history=0)": history=0: want an integer from 1 to 65536`},
		{"fp8(algo=mean)", `precision "fp8(algo=mean)": algo=mean: want max or most_recent`},
		{"fp8(format=e4m2)", `precision "fp8(format=e4m2)": format=e4m2: want hybrid, e4m3 or e5m2`},
		{"nf4(block=100)", `precision "nf4(block=100)": block=100: want 64, 128, 256, 512, 1024, 2048 or 4096`},
		{"16-mixed(init_scale=0)", `precision "16-mixed(init_scale=0)": init_scale=0: want a positive number float32 holds`},
		{"16-mixed(init_scale=1e39)", `precision "16-mixed(init_scale=1e39)": init_scale=1e39: want a positive number float32 holds`},
		{"16-mixed(growth_factor=1)", `precision "16-mixed(growth_factor=1)": growth_factor=1: want a number above 1`},
		{"16-mixed(growth_factor=inf)", `precision "16-mixed(growth_factor=inf)": growth_factor=inf: want a number above 1`},
		{"16-mixed(backoff_factor=1)", `precision "16-mixed(backoff_factor=1)": backoff_factor=1: want a number between 0 and 1, both excluded`},
		{"16-mixed(backoff_factor=NaN)", `precision "16-mixed(backoff_factor=NaN)": backoff_factor=NaN: want a number between 0 and 1, both excluded`},
		{"16-mixed(growth_interval=0)", `precision "16-mixed(growth_interval=0)": growth_interval=0: want an integer from 1 to 2147483647`},
		{"16-mixed(scale=2)", `precision "16-mixed(scale=2)": unknown argument scale; accepted: init_scale, growth_factor, backoff_factor, growth_interval, param_dtype, reduce_dtype`},
		{"int8(threshold=-1)", `precision "int8(threshold=-1)": threshold=-1: want 0 (no outlier decomposition) or a positive number`},
		{"int8(skip=)", `precision "int8(skip=)": skip=: want module patterns joined by | (as in head|blocks.0.*), or none`},
		{"nf4(skip=head|[)", `precision "nf4(skip=head|[)": skip=head|[: want module patterns joined by | (as in head|blocks.0.*), or none`},
		{"fp8(margin)", `precision "fp8(margin)": argument "margin": want ARG=VALUE`},
		{"fp8()", `precision "fp8()": argument "": want ARG=VALUE`},
		{"fp8(margin=1,margin=2)", `precision "fp8(margin=1,margin=2)": argument margin given twice`},
		{"fp8(margin=1", `precision "fp8(margin=1": want NAME(ARG=VALUE,...) with a closing parenthesis`},
		{"bf16-mixed(margin=1)", `precision "bf16-mixed(margin=1)": unknown argument margin; accepted: param_dtype, reduce_dtype`},
		{"bf16-mixed(param_dtype=float8)", `precision "bf16-mixed(param_dtype=float8)": param_dtype=float8: want bfloat16, float16 or float32`},
		{"int8(reduce_dtype=float32)", `precision "int8(reduce_dtype=float32)": unknown argument reduce_dtype; accepted: threshold, skip`},
		{"test-visits(x=1)", `precision "test-visits(x=1)": test-visits takes no arguments`},
		{"32-true(stochastic_round=true)", `precision "32-true(stochastic_round=true)": stochastic_round=true: 32-true stores parameters in float32; stochastic rounding is for bfloat16 ones (bf16-true)`},
		{"16-true(stochastic_round=false)", `precision "16-true(stochastic_round=false)": stochastic_round=false: 16-true stores parameters in float16; stochastic rounding is for bfloat16 ones (bf16-true)`},
		{"bf16-true(stochastic_round=1)", `precision "bf16-true(stochastic_round=1)": stochastic_round=1: want false or true`},
		{"bf16-mixed(stochastic_round=true)", `precision "bf16-mixed(stochastic_round=true)": unknown argument stochastic_round; accepted: param_dtype, reduce_dtype`},
	} {
		_, err := precision.ParseSpec("bf16-mixed+"+c.spec, precision.Options{})
		if err == nil || err.Error() != c.want {
			t.Errorf("ParseSpec(bf16-mixed+%s) = %v, want %s", c.spec, err, c.want)
		}
	}
	_, err := precision.ParseSpec("fp9(margin=1)", precision.Options{})
	if err == nil || !strings.HasPrefix(err.Error(), `precision "fp9(margin=1)" is not known; did you mean fp8? accepted: 64-true`) {
		t.Errorf("an unknown spec with arguments: %v", err)
	}
	for spec, want := range map[string]string{
		"bf16-mixed+":      `precision "bf16-mixed+": part 2 of 2 is empty`,
		"+fp8":             `precision "+fp8": part 1 of 2 is empty`,
		"bf16-mixed+ +fp8": `precision "bf16-mixed+ +fp8": part 2 of 3 is empty`,
		" ":                "precision: the spec is empty; accepted: 64-true",
	} {
		if _, err := precision.ParseSpec(spec, precision.Options{}); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("ParseSpec(%q) = %v, want %s...", spec, err, want)
		}
	}
}

// TestSpecStringRoundTrip: String is canonical (the table's order, values
// spelled as accepted) and parses back to itself.
func TestSpecStringRoundTrip(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{"fp8(history=16, margin=01,algo=MAX)", "fp8(margin=1,history=16,algo=max)"},
		{"bf16-mixed + fp8(margin=1)", "bf16-mixed+fp8(margin=1)"},
		{"transformer-engine(format=e4m3)", "transformer-engine(format=e4m3)"},
		{"bf16-true+nf4-dq(block=256)", "bf16-true+nf4-dq(block=256)"},
		{"bf16-true(stochastic_round=TRUE, reduce_dtype=float32)", "bf16-true(reduce_dtype=float32,stochastic_round=true)"},
		{"bf16-fp8", "bf16-mixed+fp8"},
		{"16-mixed+test-visits", "16-mixed+test-visits"},
	} {
		sp, err := precision.ParseSpec(c.spec, precision.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if sp.String() != c.want {
			t.Errorf("ParseSpec(%q).String() = %q, want %q", c.spec, sp.String(), c.want)
		}
		again, err := precision.ParseSpec(sp.String(), precision.Options{})
		if err != nil || again.String() != c.want {
			t.Errorf("ParseSpec(%q) = %q, %v; want it unchanged", sp.String(), again.String(), err)
		}
	}
}

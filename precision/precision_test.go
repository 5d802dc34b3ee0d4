package precision_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/optim/lowbit"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/precisiontest"
	"github.com/weftml/weft/tensor"
)

// Fakes that implement exactly one role each, in the manner of
// database/sql's ctxOnlyConn: they prove the helpers' fallbacks for every
// role a plugin lacks, and that the conformance suite accepts any subset.

// nameOnly implements no role at all.
type nameOnly struct{}

func (nameOnly) Name() string { return "name-only" }

// scaleOnly implements only LossScaler.
type scaleOnly struct{ s *precision.GradScaler }

func newScaleOnly() precision.Plugin          { return &scaleOnly{precision.NewGradScaler()} }
func (*scaleOnly) Name() string               { return "scale-only" }
func (p *scaleOnly) Scaler() precision.Scaler { return p.s }

// inputOnly implements only InputCaster.
type inputOnly struct{}

func (inputOnly) Name() string            { return "input-only" }
func (inputOnly) InputDType() dtype.DType { return dtype.BF16 }

// outputOnly implements only OutputCaster.
type outputOnly struct{}

func (outputOnly) Name() string             { return "output-only" }
func (outputOnly) OutputDType() dtype.DType { return dtype.F64 }

// stateDTypeOnly implements only OptimizerStater.
type stateDTypeOnly struct{}

func (stateDTypeOnly) Name() string                     { return "state-dtype-only" }
func (stateDTypeOnly) OptimizerStateDType() dtype.DType { return dtype.BF16 }

// autocastOnly implements only Autocaster: everything runs in float16.
type autocastOnly struct{}

func (autocastOnly) Name() string                                   { return "autocast-only" }
func (autocastOnly) CastInput(autograd.Op, dtype.DType) dtype.DType { return dtype.F16 }

// convertOnly implements only ModuleConverter: it rounds the module's own
// parameters to bf16 in place (a fake quantization), keeping tensors and
// dtypes.
type convertOnly struct{}

func (convertOnly) Name() string { return "convert-only" }
func (convertOnly) ConvertModule(_ string, m nn.Module) error {
	for _, p := range m.Params() {
		p.Var.Value.CopyFrom(p.Var.Value.To(dtype.BF16))
	}
	return nil
}

// storeOnly implements only StorageOwner: parameters are kept in float16.
type storeOnly struct{}

func (storeOnly) Name() string              { return "store-only" }
func (storeOnly) StorageDType() dtype.DType { return dtype.F16 }

// stateOnly implements only Stateful: a counter saved as JSON.
type stateOnly struct{ N int }

func (*stateOnly) Name() string                    { return "state-only" }
func (p *stateOnly) MarshalState() ([]byte, error) { return json.Marshal(p) }
func (p *stateOnly) UnmarshalState(b []byte) error {
	var s stateOnly
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("state-only: %w", err)
	}
	*p = s
	return nil
}

var (
	_ precision.Plugin          = nameOnly{}
	_ precision.LossScaler      = (*scaleOnly)(nil)
	_ precision.InputCaster     = inputOnly{}
	_ precision.OutputCaster    = outputOnly{}
	_ precision.OptimizerStater = stateDTypeOnly{}
	_ precision.Autocaster      = autocastOnly{}
	_ precision.ModuleConverter = convertOnly{}
	_ precision.StorageOwner    = storeOnly{}
	_ precision.Stateful        = (*stateOnly)(nil)
)

// mustParse parses spec or fails the test.
func mustParse(t *testing.T, spec string, opts precision.Options) precision.Plugin {
	t.Helper()
	p, err := precision.Parse(spec, opts)
	if err != nil {
		t.Fatalf("Parse(%q): %v", spec, err)
	}
	return p
}

func TestConformance(t *testing.T) {
	for _, spec := range precision.Specs() {
		t.Run(spec, func(t *testing.T) {
			mustParse(t, spec, precision.Options{})
			precisiontest.Run(t, func() precision.Plugin {
				p, err := precision.Parse(spec, precision.Options{})
				if err != nil {
					panic(err) // Parse succeeded just above
				}
				return p
			})
		})
	}
	t.Run("Pure/float64", func(t *testing.T) {
		precisiontest.Run(t, func() precision.Plugin { return precision.Pure{DType: dtype.F64} })
	})
	fakes := []func() precision.Plugin{
		func() precision.Plugin { return nameOnly{} },
		newScaleOnly,
		func() precision.Plugin { return inputOnly{} },
		func() precision.Plugin { return outputOnly{} },
		func() precision.Plugin { return stateDTypeOnly{} },
		func() precision.Plugin { return autocastOnly{} },
		func() precision.Plugin { return convertOnly{} },
		func() precision.Plugin { return storeOnly{} },
		func() precision.Plugin { return &stateOnly{} },
	}
	for _, newPlugin := range fakes {
		t.Run(newPlugin().Name(), func(t *testing.T) { precisiontest.Run(t, newPlugin) })
	}
	// A composition holding every role, one per member, nested once.
	t.Run("composite", func(t *testing.T) {
		precisiontest.Run(t, func() precision.Plugin {
			inner, err := precision.Compose(nameOnly{}, newScaleOnly(), inputOnly{}, outputOnly{})
			if err != nil {
				panic(err)
			}
			p, err := precision.Compose(inner, stateDTypeOnly{}, autocastOnly{}, convertOnly{}, storeOnly{}, &stateOnly{})
			if err != nil {
				panic(err)
			}
			return p
		})
	})
	t.Run("jmp", func(t *testing.T) {
		precisiontest.Run(t, func() precision.Plugin {
			p, err := precision.ParseJMP("params=float32,compute=bfloat16,output=float32")
			if err != nil {
				panic(err)
			}
			return p
		})
	})
}

// TestSpecRoles pins the roles of every canonical spec to Lightning's
// plugin of the same name.
func TestSpecRoles(t *testing.T) {
	const none = dtype.Invalid
	for _, c := range []struct {
		spec             string
		storage, in, out dtype.DType
		autocast, scaled bool
	}{
		{"64-true", dtype.F64, dtype.F64, dtype.F32, false, false},
		{"32-true", dtype.F32, dtype.F32, dtype.F32, false, false},
		{"16-mixed", none, dtype.F16, dtype.F32, true, true},
		{"bf16-mixed", none, dtype.BF16, dtype.F32, true, false},
		{"16-true", dtype.F16, dtype.F16, dtype.F32, false, false},
		{"bf16-true", dtype.BF16, dtype.BF16, dtype.F32, false, false},
	} {
		p := mustParse(t, c.spec, precision.Options{})
		if p.Name() != c.spec {
			t.Errorf("Parse(%q).Name() = %q", c.spec, p.Name())
		}
		if dt, _ := precision.StorageDType(p); dt != c.storage {
			t.Errorf("%s: StorageDType = %s, want %s", c.spec, dt, c.storage)
		}
		if dt, ok := precision.InputDType(p); !ok || dt != c.in {
			t.Errorf("%s: InputDType = %s, %v; want %s, true", c.spec, dt, ok, c.in)
		}
		if dt, ok := precision.OutputDType(p); !ok || dt != c.out {
			t.Errorf("%s: OutputDType = %s, %v; want %s, true", c.spec, dt, ok, c.out)
		}
		if got := precision.Autocast(p) != nil; got != c.autocast {
			t.Errorf("%s: has autocast %v, want %v", c.spec, got, c.autocast)
		}
		if got := precision.ScalesLoss(p); got != c.scaled {
			t.Errorf("%s: ScalesLoss %v, want %v", c.spec, got, c.scaled)
		}
		if got := len(precision.States(p)) > 0; got != c.scaled {
			t.Errorf("%s: has checkpoint state %v, want %v (only the loss scaler has state)", c.spec, got, c.scaled)
		}
		if dt, ok := precision.OptimizerStateDType(p); ok {
			t.Errorf("%s: sets the optimizer-state dtype to %s; Lightning's plugin does not", c.spec, dt)
		}
	}
	if p := mustParse(t, " bf16-mixed\n", precision.Options{}); p.Name() != "bf16-mixed" {
		t.Errorf("Parse trims spaces: got %q", p.Name())
	}
}

func TestParseUnknown(t *testing.T) {
	for _, spec := range []string{"", "fp7", "bf16-mixd", "16-MIXED", "8-true", "bf16-mixed+nope"} {
		_, err := precision.Parse(spec, precision.Options{})
		if err == nil {
			t.Errorf("Parse(%q) accepted an unknown spec", spec)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") {
			t.Errorf("Parse(%q) error spans several lines: %q", spec, msg)
		}
		words := strings.FieldsFunc(msg, func(r rune) bool { return strings.ContainsRune(" ,;:\"'`()[]", r) })
		for _, want := range precision.Specs() {
			if !slices.Contains(words, want) {
				t.Errorf("Parse(%q) error does not list accepted spec %q: %s", spec, want, msg)
			}
		}
	}
}

func TestAliases(t *testing.T) {
	for _, c := range []struct {
		spec, name string
		warnings   int
	}{
		{"16", "16-mixed", 1},
		{"bf16", "bf16-mixed", 1},
		{"32", "32-true", 0},
		{"64", "64-true", 0},
		{"16-mixed", "16-mixed", 0},
		{"bf16-mixed", "bf16-mixed", 0},
		{"32-true", "32-true", 0},
	} {
		var warnings []string
		p := mustParse(t, c.spec, precision.Options{Warn: func(msg string) { warnings = append(warnings, msg) }})
		if p.Name() != c.name {
			t.Errorf("Parse(%q).Name() = %q, want %q", c.spec, p.Name(), c.name)
		}
		if len(warnings) != c.warnings {
			t.Errorf("Parse(%q) warned %d times, want %d: %q", c.spec, len(warnings), c.warnings, warnings)
		}
		for _, w := range warnings {
			if !strings.Contains(w, c.name) {
				t.Errorf("Parse(%q) warning does not name the replacement %q: %q", c.spec, c.name, w)
			}
		}
		// Without a Warn function the notice is dropped.
		mustParse(t, c.spec, precision.Options{})
	}
}

// namedParam returns a trainable float32 parameter holding vals with gradient grad.
func namedParam(path string, vals, grad []float32) nn.NamedParam {
	v := autograd.Param(tensor.FromFloat32(slices.Clone(vals), len(vals)))
	if grad != nil {
		v.Grad = tensor.FromFloat32(slices.Clone(grad), len(grad))
	}
	return nn.NamedParam{Path: path, Var: v}
}

// scaledStep runs one scaler step over a parameter whose gradient is grad times
// the current scale, as after a scaled backward, with SGD at lr 1.
func scaledStep(t *testing.T, s precision.Scaler, grad float32) (skipped bool, p nn.NamedParam) {
	t.Helper()
	p = namedParam("w", []float32{1, 2}, []float32{grad * float32(s.Scale()), 0})
	skipped, err := s.Step(optim.NewSGD([]nn.NamedParam{p}, 1))
	if err != nil {
		t.Fatalf("scaler step: %v", err)
	}
	s.Update()
	return skipped, p
}

// stepsToGrowth runs finite steps until the scale changes and returns how
// many it took (at most limit) and the new scale.
func stepsToGrowth(t *testing.T, s precision.Scaler, limit int) (int, float64) {
	t.Helper()
	before := s.Scale()
	for n := 1; n <= limit; n++ {
		if skipped, _ := scaledStep(t, s, 0.25); skipped {
			t.Fatalf("a finite step was skipped")
		}
		if s.Scale() != before {
			return n, s.Scale()
		}
	}
	return limit + 1, s.Scale()
}

func TestOptionsGradScaler(t *testing.T) {
	opts := precision.Options{InitScale: 8, GrowthFactor: 4, BackoffFactor: 0.25, GrowthInterval: 3}
	for spec, opts := range map[string]precision.Options{"16-mixed": opts, "16": opts,
		// The same knobs as the spec's arguments, which win over Options.
		"16-mixed(init_scale=8,growth_factor=4,backoff_factor=0.25,growth_interval=3)":    {},
		"16-mixed(init_scale=8, growth_interval=3, growth_factor=4, backoff_factor=0.25)": {InitScale: 2, GrowthInterval: 7},
	} {
		p := mustParse(t, spec, opts)
		if _, ok := p.(precision.LossScaler); !ok || !precision.ScalesLoss(p) {
			t.Fatalf("%s does not implement LossScaler", spec)
		}
		s := precision.ScalerOf(p)
		if s.Scale() != 8 {
			t.Errorf("%s: InitScale 8 gave scale %v", spec, s.Scale())
		}
		if n, scale := stepsToGrowth(t, s, 10); n != 3 || scale != 32 {
			t.Errorf("%s: GrowthInterval 3, GrowthFactor 4: scale became %v after %d finite steps, want 32 after 3", spec, scale, n)
		}
		if skipped, _ := scaledStep(t, s, float32(math.Inf(1))); !skipped || s.Scale() != 8 {
			t.Errorf("%s: BackoffFactor 0.25: an inf step gave skipped=%v, scale %v; want true, 8", spec, skipped, s.Scale())
		}
	}

	// Zero options keep PyTorch's defaults.
	p := mustParse(t, "16-mixed", precision.Options{})
	gs := p.(precision.MixedScaled).GradScaler
	if gs.Scale() != 65536 || gs.GrowthFactor != 2 || gs.BackoffFactor != 0.5 || gs.GrowthInterval != 2000 {
		t.Errorf("16-mixed defaults: scale %v, growth %v, backoff %v, interval %d; want 65536, 2, 0.5, 2000",
			gs.Scale(), gs.GrowthFactor, gs.BackoffFactor, gs.GrowthInterval)
	}

	// Every other spec ignores the scaler options and does not scale.
	for _, spec := range precision.Specs() {
		p := mustParse(t, spec, opts)
		if p.Name() == "16-mixed" {
			continue
		}
		if _, ok := p.(precision.LossScaler); ok || precision.ScalesLoss(p) {
			t.Errorf("%s claims the LossScaler role; only 16-mixed scales the loss", spec)
		}
		if s := precision.ScalerOf(p).Scale(); s != 1 {
			t.Errorf("%s: loss scale %v with InitScale 8, want 1", spec, s)
		}
	}
}

func TestMixedCastInput(t *testing.T) {
	for _, low := range []dtype.DType{dtype.F16, dtype.BF16} {
		m := &precision.Mixed{DType: low}
		for _, c := range []struct {
			op   autograd.Op
			in   dtype.DType
			want dtype.DType
		}{
			{autograd.OpLinear, dtype.F32, low},
			{autograd.OpMatMul, dtype.F32, low},
			{autograd.OpConv2d, dtype.F32, low},
			{autograd.OpLinear, dtype.BF16, low},
			{autograd.OpLinear, dtype.F16, low},
			{autograd.OpLayerNorm, dtype.F32, dtype.F32},
			{autograd.OpLayerNorm, low, dtype.F32},
			{autograd.OpSoftmax, low, dtype.F32},
			{autograd.OpCrossEntropy, low, dtype.F32},
			{autograd.OpGELU, dtype.F32, dtype.F32},
			{autograd.OpGELU, low, low},
			{autograd.OpAdd, low, low},
			{autograd.OpAdd, dtype.F32, dtype.F32},
			{autograd.OpReLU, low, low},
			{autograd.OpEmbedding, dtype.F32, dtype.F32},
			{autograd.OpEmbedding, low, low},
		} {
			if got := m.CastInput(c.op, c.in); got != c.want {
				t.Errorf("Mixed{%s}.CastInput(%s, %s) = %s, want %s", low, c.op, c.in, got, c.want)
			}
		}
		// float64 is never autocast.
		for _, op := range []autograd.Op{autograd.OpLinear, autograd.OpMatMul, autograd.OpConv2d,
			autograd.OpLayerNorm, autograd.OpSoftmax, autograd.OpCrossEntropy, autograd.OpGELU, autograd.OpAdd} {
			if got := m.CastInput(op, dtype.F64); got != dtype.F64 {
				t.Errorf("Mixed{%s}.CastInput(%s, float64) = %s, want float64", low, op, got)
			}
		}
	}
}

func TestGradScalerUnscaleTwice(t *testing.T) {
	s := precision.NewGradScaler()
	s.SetScale(4)
	p := namedParam("w", []float32{1}, []float32{8})
	params := []nn.NamedParam{p}
	if err := s.Unscale(params); err != nil {
		t.Fatal(err)
	}
	if g := p.Var.Grad.Float32s()[0]; g != 2 {
		t.Errorf("gradient 8 unscaled by 4 is %v, want 2", g)
	}
	if err := s.Unscale(params); !errors.Is(err, precision.ErrUnscaledTwice) {
		t.Errorf("second Unscale in a step returned %v, want ErrUnscaledTwice", err)
	}
	if g := p.Var.Grad.Float32s()[0]; g != 2 {
		t.Errorf("the refused second Unscale changed the gradient to %v", g)
	}
	// Step after an explicit Unscale does not unscale again.
	opt := optim.NewSGD(params, 1)
	if skipped, err := s.Step(opt); err != nil || skipped {
		t.Fatalf("Step after Unscale: skipped %v, %v", skipped, err)
	}
	if v := p.Var.Value.Float32s()[0]; v != -1 {
		t.Errorf("SGD at lr 1 from 1 with unscaled gradient 2 gave %v, want -1", v)
	}
	s.Update()
	p.Var.Grad = tensor.FromFloat32([]float32{8}, 1)
	if err := s.Unscale(params); err != nil {
		t.Errorf("Unscale after Update: %v", err)
	}
}

func TestGradScalerSkipsNonFinite(t *testing.T) {
	for _, bad := range []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())} {
		s := precision.NewGradScaler()
		s.SetScale(1024)
		p := namedParam("w", []float32{1, 2}, []float32{512, bad})
		skipped, err := s.Step(optim.NewSGD([]nn.NamedParam{p}, 1))
		if err != nil {
			t.Fatal(err)
		}
		if !skipped {
			t.Errorf("gradient %v: step not skipped", bad)
		}
		if got := p.Var.Value.Float32s(); got[0] != 1 || got[1] != 2 {
			t.Errorf("gradient %v: skipped step changed the parameters to %v", bad, got)
		}
		s.Update()
		if s.Scale() != 512 {
			t.Errorf("gradient %v: scale after Update %v, want 512", bad, s.Scale())
		}
		// The next, finite step is taken with the gradient unscaled.
		skipped, p = scaledStep(t, s, 0.5)
		if skipped {
			t.Errorf("the finite step after a skipped one was skipped")
		}
		if got := p.Var.Value.Float32s()[0]; got != 0.5 {
			t.Errorf("finite step: parameter 1 - 0.5 = %v", got)
		}
	}
}

func TestGradScalerGrowth(t *testing.T) {
	s := precision.NewGradScaler()
	s.GrowthInterval = 4
	s.SetScale(16)
	if n, scale := stepsToGrowth(t, s, 10); n != 4 || scale != 32 {
		t.Errorf("scale became %v after %d finite steps, want 32 after 4", scale, n)
	}
	if n, scale := stepsToGrowth(t, s, 10); n != 4 || scale != 64 {
		t.Errorf("second growth: scale %v after %d more steps, want 64 after 4", scale, n)
	}
	// A skipped step resets the growth tracker.
	scaledStep(t, s, 1)
	scaledStep(t, s, 1)
	if skipped, _ := scaledStep(t, s, float32(math.NaN())); !skipped || s.Scale() != 32 {
		t.Fatalf("NaN step: skipped %v, scale %v; want true, 32", skipped, s.Scale())
	}
	if n, scale := stepsToGrowth(t, s, 10); n != 4 || scale != 64 {
		t.Errorf("after a skipped step the scale grew to %v after %d steps, want 64 after 4", scale, n)
	}
}

func TestGradScalerGrowthOverflow(t *testing.T) {
	s := precision.NewGradScaler()
	s.GrowthInterval = 1
	s.SetScale(0x1p127) // doubling gives 2^128: inf in float32
	scaledStep(t, s, 0.5)
	if s.Scale() != 0x1p127 {
		t.Errorf("growth past float32's range: scale %v, want 2^127 kept", s.Scale())
	}
	s.SetScale(0x1p126)
	scaledStep(t, s, 0.5)
	if s.Scale() != 0x1p127 {
		t.Errorf("growth within float32's range: scale %v, want 2^127", s.Scale())
	}
}

func TestGradScalerStateRoundTrip(t *testing.T) {
	a := precision.NewGradScaler()
	a.GrowthInterval = 5
	a.SetScale(256)
	scaledStep(t, a, 0.5)
	scaledStep(t, a, 0.5) // growth tracker 2
	b, err := a.MarshalState()
	if err != nil {
		t.Fatal(err)
	}
	r := precision.NewGradScaler()
	r.GrowthInterval = 5 // the knobs are the restoring scaler's own, from its spec
	if err := r.UnmarshalState(b); err != nil {
		t.Fatal(err)
	}
	if r.Scale() != 256 || r.GrowthInterval != 5 || r.GrowthFactor != 2 || r.BackoffFactor != 0.5 {
		t.Errorf("restored scale %v, interval %d, growth %v, backoff %v; want 256, 5, 2, 0.5",
			r.Scale(), r.GrowthInterval, r.GrowthFactor, r.BackoffFactor)
	}
	// The tracker came back: 3 more finite steps, not 5, grow both.
	for name, s := range map[string]*precision.GradScaler{"original": a, "restored": r} {
		if n, scale := stepsToGrowth(t, s, 10); n != 3 || scale != 512 {
			t.Errorf("%s: scale %v after %d more steps, want 512 after 3", name, scale, n)
		}
	}
	// A scaler of other knobs keeps them: a tracker of 2 grows a scale
	// under an interval of 2 at the next finite step, by its factor 4.
	other := precision.NewGradScaler()
	other.GrowthInterval, other.GrowthFactor = 2, 4
	if err := other.UnmarshalState(b); err != nil || other.GrowthInterval != 2 || other.GrowthFactor != 4 {
		t.Fatalf("a scaler of interval 2, growth 4 restored %v: interval %d, growth %v", err, other.GrowthInterval, other.GrowthFactor)
	}
	if n, scale := stepsToGrowth(t, other, 10); n != 1 || scale != 1024 {
		t.Errorf("restored tracker 2 under interval 2: scale %v after %d steps, want 1024 after 1", scale, n)
	}
	// A scale that is not a float32 power of two survives too.
	a.SetScale(1234.5)
	b, _ = a.MarshalState()
	if err := r.UnmarshalState(b); err != nil || r.Scale() != 1234.5 {
		t.Errorf("restored scale %v (%v), want 1234.5", r.Scale(), err)
	}

	for _, bad := range []string{`{"scale":0,"growth_interval":1}`, `{"scale":-1,"growth_interval":1}`, `{"scale":2,"growth_interval":0}`, `[1,2]`, `nope`} {
		before, _ := r.MarshalState()
		if err := r.UnmarshalState([]byte(bad)); err == nil {
			t.Errorf("UnmarshalState(%s) accepted invalid state", bad)
		}
		if after, _ := r.MarshalState(); string(after) != string(before) {
			t.Errorf("the rejected state %s changed the scaler: %s, then %s", bad, before, after)
		}
	}
}

func TestFallbacks(t *testing.T) {
	var p precision.Plugin = nameOnly{}
	s := precision.ScalerOf(p)
	if s == nil || s.Scale() != 1 {
		t.Fatalf("ScalerOf(no roles) = %v, want a scaler with scale 1", s)
	}
	// The null scaler neither unscales nor skips, even on a NaN gradient.
	np := namedParam("w", []float32{1}, []float32{float32(math.NaN())})
	np.Var.Grad = tensor.FromFloat32([]float32{3}, 1)
	if err := s.Unscale([]nn.NamedParam{np}); err != nil {
		t.Fatal(err)
	}
	if err := s.Unscale([]nn.NamedParam{np}); err != nil {
		t.Errorf("the null scaler refused a second Unscale: %v", err)
	}
	if g := np.Var.Grad.Float32s()[0]; g != 3 {
		t.Errorf("the null scaler's Unscale changed a gradient 3 to %v", g)
	}
	np.Var.Grad = tensor.FromFloat32([]float32{float32(math.NaN())}, 1)
	opt := precisiontest.NewCountingOptimizer(np)
	for i := range 3 {
		skipped, err := s.Step(opt)
		if err != nil || skipped {
			t.Errorf("null scaler step %d: skipped %v, %v; want a step", i, skipped, err)
		}
		s.Update()
	}
	if opt.Steps != 3 || s.Scale() != 1 {
		t.Errorf("null scaler: %d optimizer steps, scale %v; want 3, 1", opt.Steps, s.Scale())
	}

	if c := precision.Autocast(p); c != nil {
		t.Errorf("Autocast(no roles) = %v, want nil", c)
	}
	if dt, ok := precision.InputDType(p); ok {
		t.Errorf("InputDType(no roles) = %s, true; want ok false", dt)
	}
	if dt, ok := precision.OutputDType(p); ok {
		t.Errorf("OutputDType(no roles) = %s, true; want ok false", dt)
	}
	if dt, ok := precision.OptimizerStateDType(p); ok {
		t.Errorf("OptimizerStateDType(no roles) = %s, true; want ok false", dt)
	}
	if dt, ok := precision.StorageDType(p); ok {
		t.Errorf("StorageDType(no roles) = %s, true; want ok false", dt)
	}
	if precision.ScalesLoss(p) || len(precision.States(p)) != 0 {
		t.Errorf("a plugin without roles scales the loss or has state")
	}
	if err := precision.ConvertModule(p, nn.List[nn.Module]{}); err != nil {
		t.Errorf("ConvertModule(no roles): %v", err)
	}
	tp := &autograd.Tape{Caster: autocastOnly{}}
	exit := precision.Enter(p, tp)
	if tp.Caster != nil {
		t.Errorf("inside the scope of a plugin without autocast the tape casts with %v", tp.Caster)
	}
	exit.Exit()
}

// TestRoleHelpers checks that each helper finds the role on a plugin that
// implements only that one.
func TestRoleHelpers(t *testing.T) {
	so := newScaleOnly().(*scaleOnly)
	if s := precision.ScalerOf(so); s != precision.Scaler(so.s) {
		t.Errorf("ScalerOf(scale-only) = %v, want its GradScaler", s)
	}
	if dt, ok := precision.InputDType(inputOnly{}); !ok || dt != dtype.BF16 {
		t.Errorf("InputDType(input-only) = %s, %v", dt, ok)
	}
	if dt, ok := precision.OutputDType(outputOnly{}); !ok || dt != dtype.F64 {
		t.Errorf("OutputDType(output-only) = %s, %v", dt, ok)
	}
	if dt, ok := precision.OptimizerStateDType(stateDTypeOnly{}); !ok || dt != dtype.BF16 {
		t.Errorf("OptimizerStateDType(state-dtype-only) = %s, %v", dt, ok)
	}
	if c := precision.Autocast(autocastOnly{}); c == nil || c.CastInput(autograd.OpAdd, dtype.F32) != dtype.F16 {
		t.Errorf("Autocast(autocast-only) = %v", c)
	}
	// Each fake has no role but its own.
	if dt, ok := precision.StorageDType(storeOnly{}); !ok || dt != dtype.F16 {
		t.Errorf("StorageDType(store-only) = %s, %v", dt, ok)
	}
	if st := precision.States(&stateOnly{}); len(st) != 1 || st["state-only"] == nil {
		t.Errorf("States(state-only) = %v", st)
	}
	for _, p := range []precision.Plugin{so, inputOnly{}, outputOnly{}, stateDTypeOnly{}, autocastOnly{}, convertOnly{}, storeOnly{}, &stateOnly{}} {
		roles := 0
		for _, has := range []bool{
			is[precision.LossScaler](p), is[precision.InputCaster](p), is[precision.OutputCaster](p),
			is[precision.OptimizerStater](p), is[precision.Autocaster](p), is[precision.ModuleConverter](p),
			is[precision.StorageOwner](p), is[precision.Stateful](p),
		} {
			if has {
				roles++
			}
		}
		if roles != 1 {
			t.Errorf("fake %s implements %d roles, want 1", p.Name(), roles)
		}
	}
}

func is[R any](p precision.Plugin) bool { _, ok := p.(R); return ok }

// TestLowBitStateComposes: adamw8bit, adamw4bit and adamwfp8 join a spec
// with + and hold the optimizer-state role, which a second claimant makes
// a one-line conflict.
func TestLowBitStateComposes(t *testing.T) {
	for _, f := range []*lowbit.Format{lowbit.AdamW8bit, lowbit.AdamW4bit, lowbit.AdamWFp8} {
		p, err := precision.Parse("bf16-mixed+"+f.Name, precision.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := precision.OptimizerFormat(p); got != f || p.Name() != "bf16-mixed+"+f.Name {
			t.Errorf("%s: OptimizerFormat = %v, want %v", p.Name(), got, f)
		}
		if _, ok := precision.OptimizerStateDType(p); ok {
			t.Errorf("%s claims an optimizer-state dtype too", p.Name())
		}
	}
	_, err := precision.Compose(precision.LowBitState{Format: lowbit.AdamW8bit}, stateDTypeOnly{})
	want := "precision: role optimizer state claimed by adamw8bit (8-bit moments in blocks of 256) and state-dtype-only (bfloat16)"
	if err == nil || err.Error() != want {
		t.Errorf("Compose(adamw8bit, state-dtype-only) = %v, want %q", err, want)
	}
}

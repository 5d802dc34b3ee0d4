// Package precisiontest checks that a precision plugin behaves as the fabric
// and the strategies assume, whatever set of roles it implements. It is to
// precision.Plugin what testing/slogtest is to slog.Handler: a plugin's whole
// conformance test is
//
//	func TestConformance(t *testing.T) {
//		precisiontest.Run(t, func() precision.Plugin { return myPlugin{} })
//	}
package precisiontest

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/tensor"
)

// Run checks the plugins newPlugin returns; each call must return a fresh
// plugin in its initial state. It checks that:
//
//   - Name is non-empty and the same on every call and for every fresh plugin;
//   - the state of every Stateful member (precision.States) survives
//     MarshalState, UnmarshalState on a fresh plugin and MarshalState again
//     byte for byte (also after the loss scaler has run a step), and garbage
//     or truncated state is rejected with an error, not a panic;
//   - precision.Enter installs the plugin's compute role on a tape and its
//     Exit restores the previous Caster, also when the code inside
//     the scope panics, and nested scopes unwind in order;
//   - precision.ConvertModule keeps every parameter's *autograd.Var (same
//     pointers under the same paths, still trainable, same shapes) but
//     those it freezes (which leave the model holding no floating value and
//     no gradient, as quantized weights do) and adds none but those a
//     member lists as its own (Params, as LoRA's adapters: new, trainable,
//     floating Vars under new paths), leaves every parameter in the StorageOwner's dtype when there is one, and
//     changes nothing at all when no member is a ModuleConverter or a
//     StorageOwner;
//   - no other role touches the model;
//   - the dtypes the plugin names (storage, input, output, optimizer state,
//     autocast choices) are floating-point formats, and its loss scale is
//     finite and positive;
//   - a converted model runs a forward pass in the plugin's scope.
func Run(t *testing.T, newPlugin func() precision.Plugin) {
	t.Helper()
	t.Run("Name", func(t *testing.T) { testName(t, newPlugin) })
	t.Run("State", func(t *testing.T) { testState(t, newPlugin) })
	t.Run("Enter", func(t *testing.T) { testEnter(t, newPlugin) })
	t.Run("ConvertModule", func(t *testing.T) { testConvertModule(t, newPlugin) })
	t.Run("NoMutationOutsideConversion", func(t *testing.T) { testNoMutation(t, newPlugin) })
	t.Run("DTypes", func(t *testing.T) { testDTypes(t, newPlugin) })
	t.Run("Forward", func(t *testing.T) { testForward(t, newPlugin) })
}

// ops is every autograd op a Caster can be asked about.
var ops = []autograd.Op{
	autograd.OpLinear, autograd.OpMatMul, autograd.OpConv2d, autograd.OpLayerNorm,
	autograd.OpSoftmax, autograd.OpCrossEntropy, autograd.OpAdd, autograd.OpMul,
	autograd.OpGELU, autograd.OpReLU, autograd.OpMaskedFill, autograd.OpEmbedding,
	autograd.OpRMSNorm, autograd.OpSiLU, autograd.OpRotary,
}

// floats are the input dtypes a Caster is asked about.
var floats = []dtype.DType{dtype.F64, dtype.F32, dtype.F16, dtype.BF16}

func testName(t *testing.T, newPlugin func() precision.Plugin) {
	p := newPlugin()
	name := p.Name()
	if name == "" {
		t.Fatalf("%T: Name() is empty", p)
	}
	if again := p.Name(); again != name {
		t.Errorf("%T: Name() changed between calls: %q, then %q", p, name, again)
	}
	if other := newPlugin().Name(); other != name {
		t.Errorf("%T: a fresh plugin is named %q, the first %q", p, other, name)
	}
}

func testState(t *testing.T, newPlugin func() precision.Plugin) {
	p := newPlugin()
	states := precision.States(p)
	if len(states) == 0 {
		t.Skipf("%s has no Stateful member", p.Name())
	}
	roundTrip := func(when string) {
		t.Helper()
		fp := newPlugin()
		fresh := precision.States(fp)
		for name, s := range states {
			b, err := s.MarshalState()
			if err != nil {
				t.Fatalf("%s: %s: MarshalState %s: %v", p.Name(), name, when, err)
			}
			f, ok := fresh[name]
			if !ok {
				t.Fatalf("%s: a fresh plugin has no state %q", p.Name(), name)
			}
			if err := unmarshalRecovering(f, b); err != nil {
				t.Fatalf("%s: %s: UnmarshalState of its own state %s: %v\nstate: %q", p.Name(), name, when, err, b)
			}
			again, err := f.MarshalState()
			if err != nil {
				t.Fatalf("%s: %s: MarshalState after UnmarshalState %s: %v", p.Name(), name, when, err)
			}
			if !bytes.Equal(b, again) {
				t.Errorf("%s: state %s does not round-trip %s:\nsaved    %q\nrestored %q", p.Name(), name, when, b, again)
			}
		}
		if got, want := precision.ScalerOf(fp).Scale(), precision.ScalerOf(p).Scale(); got != want {
			t.Errorf("%s: restored loss scale %v %s, saved %v", p.Name(), got, when, want)
		}
	}
	roundTrip("initially")
	// Run the loss scaler through one finite step so that the state is
	// no longer the initial one (a growth tracker moves).
	sc := precision.ScalerOf(p)
	param := autograd.Param(tensor.FromFloat32([]float32{1, -2}, 2))
	param.Grad = tensor.FromFloat32([]float32{float32(sc.Scale()), 0}, 2)
	opt := NewCountingOptimizer(nn.NamedParam{Path: "w", Var: param})
	if _, err := sc.Step(opt); err != nil {
		t.Fatalf("%s: scaler step on finite gradients: %v", p.Name(), err)
	}
	sc.Update()
	roundTrip("after a step")

	for name, s := range states {
		good, err := s.MarshalState()
		if err != nil {
			t.Fatal(err)
		}
		// Empty state need not be an error (it may mean "defaults"), but
		// it must not panic.
		if err := unmarshalRecovering(precision.States(newPlugin())[name], nil); err != nil {
			if pe, ok := err.(panicError); ok {
				t.Errorf("%s: %s: UnmarshalState(nil) panicked: %v", p.Name(), name, pe.v)
			}
		}
		garbage := map[string][]byte{
			"binary": {0xff, 0x00, 0xfe, 0x01},
			"text":   []byte("this is not plugin state"),
		}
		if len(good) >= 2 {
			garbage["truncated"] = good[:len(good)/2]
		}
		for what, b := range garbage {
			err := unmarshalRecovering(precision.States(newPlugin())[name], b)
			if err == nil {
				t.Errorf("%s: %s: UnmarshalState(%s state %q) returned no error", p.Name(), name, what, b)
			} else if pe, ok := err.(panicError); ok {
				t.Errorf("%s: %s: UnmarshalState(%s state %q) panicked: %v", p.Name(), name, what, b, pe.v)
			}
		}
	}
}

type panicError struct{ v any }

func (e panicError) Error() string { return fmt.Sprint("panic: ", e.v) }

func unmarshalRecovering(s precision.Stateful, b []byte) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = panicError{v}
		}
	}()
	return s.UnmarshalState(b)
}

// sentinel is a Caster the test installs before entering a scope.
type sentinel struct{ id int }

func (*sentinel) CastInput(_ autograd.Op, in dtype.DType) dtype.DType { return in }

func testEnter(t *testing.T, newPlugin func() precision.Plugin) {
	p := newPlugin()
	want := precision.Autocast(p)
	outer, inner := &sentinel{1}, &sentinel{2}
	tp := &autograd.Tape{Caster: outer}

	exit := precision.Enter(p, tp)
	checkScopeCaster(t, p, tp.Caster, want)
	exit.Exit()
	if tp.Caster != autograd.Caster(outer) {
		t.Fatalf("%s: after exit the tape's Caster is %#v, want the one installed before Enter", p.Name(), tp.Caster)
	}

	// The scope panics: a deferred exit restores the Caster.
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want the panic from inside the scope", v)
			}
		}()
		exit := precision.Enter(p, tp)
		defer exit.Exit()
		panic("boom")
	}()
	if tp.Caster != autograd.Caster(outer) {
		t.Errorf("%s: after a panic inside the scope the tape's Caster is %#v, want the one installed before Enter", p.Name(), tp.Caster)
	}

	// Nested scopes unwind in order.
	exit1 := precision.Enter(p, tp)
	tp.Caster = inner // code inside the scope may install its own
	exit2 := precision.Enter(p, tp)
	checkScopeCaster(t, p, tp.Caster, want)
	exit2.Exit()
	if tp.Caster != autograd.Caster(inner) {
		t.Errorf("%s: the inner exit restored %#v, want the Caster of the enclosing scope", p.Name(), tp.Caster)
	}
	exit1.Exit()
	if tp.Caster != autograd.Caster(outer) {
		t.Errorf("%s: the outer exit restored %#v, want the Caster installed before Enter", p.Name(), tp.Caster)
	}
}

// checkScopeCaster checks that inside a scope the tape casts as the
// plugin's compute role does (nothing when it has none). Casters are
// compared by behaviour: a plugin value need not be comparable.
func checkScopeCaster(t *testing.T, p precision.Plugin, got, want autograd.Caster) {
	t.Helper()
	if want == nil {
		if got != nil {
			t.Errorf("%s has no Autocaster role, but inside its scope the tape's Caster is %#v, want nil", p.Name(), got)
		}
		return
	}
	if got == nil {
		t.Fatalf("%s: inside its scope the tape has no Caster, want its compute role", p.Name())
	}
	for _, op := range ops {
		for _, in := range floats {
			if g, w := got.CastInput(op, in), want.CastInput(op, in); g != w {
				t.Errorf("%s: inside its scope %s on %s casts to %s, its compute role to %s", p.Name(), op, in, g, w)
			}
		}
	}
}

// snapshot records a model's parameters: paths, Vars and values.
type snapshot struct {
	paths  []string
	vars   []*autograd.Var
	values []*tensor.Tensor // the tensor each Var held
	bytes  [][]byte         // a copy of its bytes
	dtypes []dtype.DType
	grads  []*tensor.Tensor
}

// take snapshots m's parameters but those in skip.
func take(m nn.Module, skip ...map[*autograd.Var]bool) snapshot {
	var s snapshot
	for _, p := range nn.Parameters(m) {
		if len(skip) > 0 && skip[0][p.Var] {
			continue
		}
		s.paths = append(s.paths, p.Path)
		s.vars = append(s.vars, p.Var)
		s.values = append(s.values, p.Var.Value)
		s.bytes = append(s.bytes, bytes.Clone(p.Var.Value.Data()))
		s.dtypes = append(s.dtypes, p.Var.Value.DType())
		s.grads = append(s.grads, p.Var.Grad)
	}
	return s
}

// newModel is the small model tree the checks convert: the reference MLP
// with a fixed initialisation and a gradient on every parameter.
func newModel() *models.MLP {
	m := models.NewMLP(nn.NewInit(1))
	for _, p := range nn.Parameters(m) {
		p.Var.Grad = tensor.New(p.Var.Value.DType(), p.Var.Value.Shape()...)
		p.Var.Grad.Fill(0.5)
	}
	return m
}

// sameStructure checks that m still has the parameters of before, same
// Var pointers under the same paths, and returns, for each parameter m has
// now, its index in before. With freezing set, a parameter may have left
// the model if its Var was frozen: no floating value and no gradient any
// more, as the weights a quantizing plugin (nf4, int8) takes over.
func sameStructure(t *testing.T, name string, before snapshot, m nn.Module, freezing bool, added map[*autograd.Var]bool) (kept []int) {
	t.Helper()
	after := take(m, added)
	for i := range before.paths {
		if len(kept) < len(after.paths) && after.paths[len(kept)] == before.paths[i] {
			if after.vars[len(kept)] != before.vars[i] {
				t.Errorf("%s: parameter %s is a new *autograd.Var after conversion; an optimizer set up before would no longer update it", name, before.paths[i])
			}
			kept = append(kept, i)
			continue
		}
		v := before.vars[i]
		if !freezing || v.Value.DType().IsFloat() || v.Grad != nil {
			t.Errorf("%s: parameter %s left the model in conversion but still holds a floating value or a gradient (not frozen)", name, before.paths[i])
		}
	}
	if len(kept) != len(after.paths) {
		t.Errorf("%s: the model has parameters %q after conversion, %q before", name, after.paths, before.paths)
	}
	return kept
}

// unchanged checks that nothing about m's parameters changed: Vars,
// tensors, bytes, dtypes and gradients.
func unchanged(t *testing.T, name, what string, before snapshot, m nn.Module) {
	t.Helper()
	sameStructure(t, name, before, m, false, nil)
	after := take(m)
	for i := range min(len(before.paths), len(after.paths)) {
		path := before.paths[i]
		switch {
		case after.values[i] != before.values[i]:
			t.Errorf("%s: %s replaced the value tensor of %s", name, what, path)
		case after.dtypes[i] != before.dtypes[i]:
			t.Errorf("%s: %s changed %s from %s to %s", name, what, path, before.dtypes[i], after.dtypes[i])
		case !bytes.Equal(after.bytes[i], before.bytes[i]):
			t.Errorf("%s: %s changed the values of %s", name, what, path)
		}
		if after.grads[i] != before.grads[i] {
			t.Errorf("%s: %s changed the gradient of %s", name, what, path)
		}
	}
}

func testConvertModule(t *testing.T, newPlugin func() precision.Plugin) {
	p := newPlugin()
	m := newModel()
	before := take(m)
	if err := precision.ConvertModule(p, m); err != nil {
		t.Fatalf("%s: ConvertModule: %v", p.Name(), err)
	}
	storage, stores := precision.StorageDType(p)
	if !converts(p) && !stores {
		unchanged(t, p.Name(), "ConvertModule without a ModuleConverter or StorageOwner role", before, m)
		return
	}
	added := addedParams(t, p, before, m)
	kept := sameStructure(t, p.Name(), before, m, true, added)
	var own []nn.NamedParam
	for _, np := range nn.Parameters(m) {
		if !added[np.Var] {
			own = append(own, np)
		}
	}
	for i, np := range own {
		if i >= len(kept) {
			break
		}
		v := np.Var
		if v.Value == nil {
			t.Errorf("%s: conversion left %s without a value", p.Name(), np.Path)
			continue
		}
		if !v.RequiresGrad() {
			t.Errorf("%s: conversion made %s a constant", p.Name(), np.Path)
		}
		if was := before.values[kept[i]]; !v.Value.SameShape(was) {
			t.Errorf("%s: conversion changed the shape of %s from %v to %v", p.Name(), np.Path, was.Shape(), v.Value.Shape())
		}
		if dt := v.Value.DType(); stores && dt != storage {
			t.Errorf("%s: after conversion %s is %s, want the storage dtype %s", p.Name(), np.Path, dt, storage)
		} else if !dt.IsFloat() {
			t.Errorf("%s: conversion made %s %s, not a floating dtype", p.Name(), np.Path, dt)
		}
	}
	// Converting twice keeps the identity too.
	if err := precision.ConvertModule(p, m); err != nil {
		t.Fatalf("%s: second ConvertModule: %v", p.Name(), err)
	}
	sameStructure(t, p.Name(), before, m, true, added)
	if again := addedParams(t, p, before, m); len(again) != len(added) {
		t.Errorf("%s: a second ConvertModule added %d parameters more", p.Name(), len(again)-len(added))
	}
}

// paramsAdder is a plugin that adds parameters of its own to the model in
// conversion (LoRA's adapters) and lists them, for the optimizer.
type paramsAdder interface{ Params() []nn.NamedParam }

// addedParams checks the parameters p's members list as added: each a new
// Var in m under its path, trainable and floating; it returns them.
func addedParams(t *testing.T, p precision.Plugin, before snapshot, m nn.Module) map[*autograd.Var]bool {
	t.Helper()
	in := map[*autograd.Var]string{}
	for _, np := range nn.Parameters(m) {
		in[np.Var] = np.Path
	}
	old := map[*autograd.Var]bool{}
	for _, v := range before.vars {
		old[v] = true
	}
	added := map[*autograd.Var]bool{}
	for _, mem := range precision.Members(p) {
		a, ok := mem.(paramsAdder)
		if !ok {
			continue
		}
		for _, np := range a.Params() {
			switch v := np.Var; {
			case old[v]:
				t.Errorf("%s: lists %s as a parameter it added, but the model had it before conversion", p.Name(), np.Path)
			case in[v] != np.Path:
				t.Errorf("%s: lists %s as a parameter it added, but the model has it at %q", p.Name(), np.Path, in[v])
			case v.Value == nil || !v.Value.DType().IsFloat() || !v.RequiresGrad():
				t.Errorf("%s: added %s without a trainable floating value", p.Name(), np.Path)
			}
			added[np.Var] = true
		}
	}
	return added
}

// converts reports whether a member of p replaces layers.
func converts(p precision.Plugin) bool {
	for _, m := range precision.Members(p) {
		if _, ok := m.(precision.ModuleConverter); ok {
			return true
		}
	}
	return false
}

func testNoMutation(t *testing.T, newPlugin func() precision.Plugin) {
	p := newPlugin()
	m := newModel()
	before := take(m)
	_ = p.Name()
	precision.StorageDType(p)
	precision.InputDType(p)
	precision.OutputDType(p)
	precision.OptimizerStateDType(p)
	precision.OptimizerFormat(p)
	precision.RoundsStochastically(p)
	if c := precision.Autocast(p); c != nil {
		for _, op := range ops {
			for _, in := range floats {
				c.CastInput(op, in)
			}
		}
	}
	_ = precision.ScalerOf(p).Scale()
	for name, s := range precision.States(p) {
		if _, err := s.MarshalState(); err != nil {
			t.Fatalf("%s: %s: MarshalState: %v", p.Name(), name, err)
		}
	}
	tp := &autograd.Tape{}
	exit := precision.Enter(p, tp)
	exit.Exit()
	unchanged(t, p.Name(), "a role other than module conversion", before, m)
}

func testDTypes(t *testing.T, newPlugin func() precision.Plugin) {
	p := newPlugin()
	for _, c := range []struct {
		role string
		get  func(precision.Plugin) (dtype.DType, bool)
	}{
		{"StorageDType", precision.StorageDType},
		{"InputDType", precision.InputDType},
		{"OutputDType", precision.OutputDType},
		{"OptimizerStateDType", precision.OptimizerStateDType},
	} {
		if dt, ok := c.get(p); ok && !dt.IsFloat() {
			t.Errorf("%s: %s is %s, not a floating dtype", p.Name(), c.role, dt)
		}
	}
	if c := precision.Autocast(p); c != nil {
		for _, op := range ops {
			for _, in := range floats {
				if out := c.CastInput(op, in); !out.IsFloat() {
					t.Errorf("%s: autocast casts %s input of %s to %s, not a floating dtype", p.Name(), in, op, out)
				}
			}
		}
	}
	if s := precision.ScalerOf(p).Scale(); !(s > 0) || math.IsInf(s, 0) {
		t.Errorf("%s: loss scale %v, want finite and positive", p.Name(), s)
	}
}

// testForward runs the converted model on a batch as the fabric does:
// input cast, forward in the plugin's scope, output cast.
func testForward(t *testing.T, newPlugin func() precision.Plugin) {
	p := newPlugin()
	defer func() {
		if v := recover(); v != nil {
			t.Errorf("%s: the forward pass panicked: %v", p.Name(), v)
		}
	}()
	m := newModel()
	if err := precision.ConvertModule(p, m); err != nil {
		t.Fatalf("%s: ConvertModule: %v", p.Name(), err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	xs := make([]float32, 4*32)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64())
	}
	x := tensor.FromFloat32(xs, 4, 32)
	if dt, ok := precision.InputDType(p); ok {
		x = x.To(dt)
	}
	tp := &autograd.Tape{}
	exit := precision.Enter(p, tp)
	out, err := m.Forward(tp, data.Batch{X: x})
	exit.Exit()
	if err != nil {
		t.Fatalf("%s: forward: %v", p.Name(), err)
	}
	if dt, ok := precision.OutputDType(p); ok {
		out = tp.Cast(out, dt)
		if out.Value.DType() != dt {
			t.Errorf("%s: output is %s after the cast to its OutputDType %s", p.Name(), out.Value.DType(), dt)
		}
	}
	if got := out.Value.Shape(); len(got) != 2 || got[0] != 4 || got[1] != 10 {
		t.Errorf("%s: logits have shape %v, want [4 10]", p.Name(), got)
	}
	if out.Value.HasNonFinite() {
		t.Errorf("%s: logits of a freshly initialised model are not finite: %v", p.Name(), out.Value.Float64s())
	}
}

// CountingOptimizer is an optimizer that only counts its steps, for tests
// of loss scalers (did the scaler step or skip?).
type CountingOptimizer struct {
	Steps  int
	params []nn.NamedParam
}

// NewCountingOptimizer returns a CountingOptimizer over params.
func NewCountingOptimizer(params ...nn.NamedParam) *CountingOptimizer {
	return &CountingOptimizer{params: params}
}

func (o *CountingOptimizer) Step()                       { o.Steps++ }
func (o *CountingOptimizer) ZeroGrad()                   {}
func (o *CountingOptimizer) Params() []nn.NamedParam     { return o.params }
func (o *CountingOptimizer) SetParams(p []nn.NamedParam) { o.params = p }

var _ optim.Optimizer = (*CountingOptimizer)(nil)

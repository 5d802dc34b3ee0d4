package fabric_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/comm"
	"github.com/weftml/weft/comm/local"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/fabric"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/tensor"
)

// Test plugins that implement only some roles (database/sql's
// ctxOnlyConn): each proves the fabric's fallback for the roles it lacks.

// noRoles implements no role: the fabric must train as plain float32.
type noRoles struct{}

func (*noRoles) Name() string { return "no-roles" }

// scaleOnly implements only LossScaler, with a real GradScaler.
type scaleOnly struct{ s *precision.GradScaler }

func (*scaleOnly) Name() string               { return "scale-only" }
func (p *scaleOnly) Scaler() precision.Scaler { return p.s }

// stateDTypeOnly implements only OptimizerStater: moments in bf16.
type stateDTypeOnly struct{}

func (*stateDTypeOnly) Name() string                     { return "state-dtype-only" }
func (*stateDTypeOnly) OptimizerStateDType() dtype.DType { return dtype.BF16 }

var (
	_ precision.Plugin          = (*noRoles)(nil)
	_ precision.LossScaler      = (*scaleOnly)(nil)
	_ precision.OptimizerStater = (*stateDTypeOnly)(nil)
)

func newScaleOnly(scale float64) *scaleOnly {
	s := precision.NewGradScaler()
	s.SetScale(scale)
	return &scaleOnly{s}
}

func mustParse(t *testing.T, spec string) precision.Plugin {
	t.Helper()
	p, err := precision.Parse(spec, precision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var adamW = optim.AdamWConfig{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}

// newMLP returns the reference MLP with a fixed initialisation.
func newMLP() *models.MLP { return models.NewMLP(nn.NewInit(1)) }

// batches returns n fixed random batches of 16 rows for the MLP.
func batches(n int) []data.Batch {
	rng := rand.New(rand.NewPCG(7, 8))
	out := make([]data.Batch, n)
	for i := range out {
		x := make([]float32, 16*32)
		for j := range x {
			x[j] = float32(rng.NormFloat64())
		}
		y := make([]int, 16)
		for j := range y {
			y[j] = rng.IntN(10)
		}
		out[i] = data.Batch{X: tensor.FromFloat32(x, 16, 32), Targets: y}
	}
	return out
}

// manualLoss is the plain autograd loop's forward and backward: no fabric.
func manualLoss(t *testing.T, tp *autograd.Tape, m *models.MLP, b data.Batch) float64 {
	t.Helper()
	logits, err := m.Forward(tp, b)
	if err != nil {
		t.Fatal(err)
	}
	loss, err := tp.CrossEntropy(logits, b.Targets)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Backward(loss); err != nil {
		t.Fatal(err)
	}
	return loss.Value.Float64s()[0]
}

// fabricLoss is the fabric loop's input, forward, loss and backward.
func fabricLoss(t *testing.T, f *fabric.Fabric, m models.Model, b data.Batch) float64 {
	t.Helper()
	b.X = f.Input(b.X)
	logits, err := f.Forward(func(tp *autograd.Tape) (*autograd.Var, error) { return m.Forward(tp, b) })
	if err != nil {
		t.Fatal(err)
	}
	loss, err := f.Tape().CrossEntropy(logits, b.Targets)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Backward(loss); err != nil {
		t.Fatal(err)
	}
	return loss.Value.Float64s()[0]
}

// sameParams fails unless a and b hold bit-identical parameters.
func sameParams(t *testing.T, a, b nn.Module) {
	t.Helper()
	pa, pb := nn.Parameters(a), nn.Parameters(b)
	for i := range pa {
		va, vb := pa[i].Var.Value, pb[i].Var.Value
		if va.DType() != vb.DType() || !bytes.Equal(va.Data(), vb.Data()) {
			t.Errorf("%s: fabric %s differs from the manual loop's %s", pa[i].Path, vb, va)
		}
	}
}

// grads returns each parameter's gradient by path.
func grads(params []nn.NamedParam) map[string][]float32 {
	out := map[string][]float32{}
	for _, p := range params {
		if p.Var.Grad != nil {
			out[p.Path] = p.Var.Grad.Float32s()
		}
	}
	return out
}

// TestNoRolesTrainsUnchanged: with no role at all the fabric is the plain
// float32 loop, bit for bit.
func TestNoRolesTrainsUnchanged(t *testing.T) {
	ref, fab := newMLP(), newMLP()
	refOpt, err := optim.NewAdamW(nn.Parameters(ref), adamW)
	if err != nil {
		t.Fatal(err)
	}
	fabOpt, err := optim.NewAdamW(nn.Parameters(fab), adamW)
	if err != nil {
		t.Fatal(err)
	}
	f := newFabric(t, fabric.Config{Precision: &noRoles{}})
	if err := f.Setup(fab, fabOpt); err != nil {
		t.Fatal(err)
	}
	var tp autograd.Tape
	for s, b := range batches(3) {
		want := manualLoss(t, &tp, ref, b)
		refOpt.Step()
		refOpt.ZeroGrad()

		got := fabricLoss(t, f, fab, b)
		if skipped, err := f.Step(); err != nil || skipped {
			t.Fatalf("step %d: skipped %v, %v", s, skipped, err)
		}
		if got != want {
			t.Errorf("step %d: fabric loss %v, manual loop %v", s, got, want)
		}
	}
	sameParams(t, ref, fab)
	for _, p := range nn.Parameters(fab) {
		if dt := p.Var.Value.DType(); dt != dtype.F32 {
			t.Errorf("%s is %s, want float32", p.Path, dt)
		}
		if p.Var.Grad != nil {
			t.Errorf("%s still has a gradient after Step", p.Path)
		}
		if dt := fabOpt.State(p.Path).ExpAvg.DType(); dt != dtype.F32 {
			t.Errorf("%s: AdamW state in %s, want the parameter's float32", p.Path, dt)
		}
	}
	if s := f.LossScale(); s != 1 {
		t.Errorf("LossScale() = %v without a LossScaler, want 1", s)
	}
	if err := f.NonFinite(); err != nil {
		t.Errorf("NonFinite() = %v for a finite run", err)
	}
	if f.Precision().Name() != "no-roles" {
		t.Errorf("Precision() = %v", f.Precision())
	}
}

// recordingOpt records the gradients its optimizer is stepped with.
type recordingOpt struct {
	optim.Optimizer
	seen map[string][]float32
}

func (o *recordingOpt) Step() {
	o.seen = grads(o.Params())
	o.Optimizer.Step()
}

// TestScaleOnly: Backward seeds with the scale, and Step hands the
// optimizer unscaled gradients.
func TestScaleOnly(t *testing.T) {
	const scale = 1024
	ref, fab := newMLP(), newMLP()
	refOpt := optim.NewSGD(nn.Parameters(ref), 0.1)
	opt := &recordingOpt{Optimizer: optim.NewSGD(nn.Parameters(fab), 0.1)}
	p := newScaleOnly(scale)
	f := newFabric(t, fabric.Config{Precision: p})
	if err := f.Setup(fab, opt); err != nil {
		t.Fatal(err)
	}
	if f.LossScale() != scale {
		t.Fatalf("LossScale() = %v, want the scaler's %v", f.LossScale(), scale)
	}
	for s, b := range batches(2) {
		var tp autograd.Tape
		manualLoss(t, &tp, ref, b)
		want := grads(nn.Parameters(ref))
		refOpt.Step()
		refOpt.ZeroGrad()

		fabricLoss(t, f, fab, b)
		scaled := grads(nn.Parameters(fab))
		for path, g := range want {
			for i := range g {
				if scaled[path][i] != g[i]*scale {
					t.Fatalf("step %d: %s[%d]: gradient after Backward %v, want %v × scale %v", s, path, i, scaled[path][i], g[i], scale)
				}
			}
		}
		if skipped, err := f.Step(); err != nil || skipped {
			t.Fatalf("step %d: skipped %v, %v", s, skipped, err)
		}
		for path, g := range want {
			if !slices.Equal(opt.seen[path], g) {
				t.Fatalf("step %d: the optimizer saw %s's gradient %v..., want the unscaled %v...", s, path, opt.seen[path][:2], g[:2])
			}
		}
	}
	sameParams(t, ref, fab)

	// A non-finite gradient: the step is skipped and the scale halves.
	before := nn.Parameters(fab)[0].Var.Value.Clone()
	fabricLoss(t, f, fab, batches(1)[0])
	g := nn.Parameters(fab)[0].Var.Grad
	vals := g.Float32s()
	vals[0] = float32(math.NaN())
	nn.Parameters(fab)[0].Var.Grad = tensor.FromFloat32(vals, g.Shape()...)
	skipped, err := f.Step()
	if err != nil || !skipped {
		t.Fatalf("step with a NaN gradient: skipped %v, %v; want skipped", skipped, err)
	}
	if !bytes.Equal(nn.Parameters(fab)[0].Var.Value.Data(), before.Data()) {
		t.Errorf("a skipped step changed %s", nn.Parameters(fab)[0].Path)
	}
	if f.LossScale() != scale/2 {
		t.Errorf("LossScale() = %v after a skipped step, want %v", f.LossScale(), scale/2)
	}
}

// TestOptimizerStateDType: an OptimizerStater plugin makes AdamW create
// its moments in its dtype; parameters stay float32.
func TestOptimizerStateDType(t *testing.T) {
	m := newMLP()
	opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
	if err != nil {
		t.Fatal(err)
	}
	f := newFabric(t, fabric.Config{Precision: &stateDTypeOnly{}})
	if err := f.Setup(m, opt); err != nil {
		t.Fatal(err)
	}
	fabricLoss(t, f, m, batches(1)[0])
	if _, err := f.Step(); err != nil {
		t.Fatal(err)
	}
	for _, p := range nn.Parameters(m) {
		st := opt.State(p.Path)
		if st == nil {
			t.Fatalf("%s has no AdamW state after a step", p.Path)
		}
		if st.ExpAvg.DType() != dtype.BF16 || st.ExpAvgSq.DType() != dtype.BF16 {
			t.Errorf("%s: moments in %s and %s, want bfloat16", p.Path, st.ExpAvg.DType(), st.ExpAvgSq.DType())
		}
		if dt := p.Var.Value.DType(); dt != dtype.F32 {
			t.Errorf("%s is %s; the optimizer-state role must not cast parameters", p.Path, dt)
		}
	}
}

func TestOptimizerStateDTypeNeedsSupport(t *testing.T) {
	m := newMLP()
	err := newFabric(t, fabric.Config{Precision: &stateDTypeOnly{}}).Setup(m, optim.NewSGD(nn.Parameters(m), 0.1))
	if err == nil {
		t.Fatal("Setup gave SGD an optimizer-state dtype it cannot hold, without error")
	}
	for _, want := range []string{"state-dtype-only", "*optim.SGD", "optimizer-state dtype"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Setup error does not mention %q: %v", want, err)
		}
	}
}

func TestInput(t *testing.T) {
	ids := tensor.New(dtype.I64, 4)
	x := tensor.FromFloat32([]float32{1, 1.00390625, -3.14159, 65504}, 4)

	f := newFabric(t, fabric.Config{Precision: mustParse(t, "bf16-mixed")})
	if got := f.Input(ids); got != ids {
		t.Errorf("bf16-mixed: Input cast an int64 tensor to %s", got)
	}
	got := f.Input(x)
	if got.DType() != dtype.BF16 {
		t.Fatalf("bf16-mixed: Input gave %s, want bfloat16", got)
	}
	if want := x.To(dtype.BF16); !bytes.Equal(got.Data(), want.Data()) {
		t.Errorf("bf16-mixed: Input gave %v, want %v", got.Float32s(), want.Float32s())
	}
	if x.DType() != dtype.F32 || x.Float32s()[1] != 1.00390625 {
		t.Errorf("Input modified its argument")
	}
	if f.Input(nil) != nil {
		t.Errorf("Input(nil) is not nil")
	}

	if got := newFabric(t, fabric.Config{Precision: mustParse(t, "16-true")}).Input(x); got.DType() != dtype.F16 {
		t.Errorf("16-true: Input gave %s, want float16", got)
	}
	if got := newFabric(t, fabric.Config{Precision: &noRoles{}}).Input(x); got != x {
		t.Errorf("without an InputCaster, Input returned %s, want its argument", got)
	}
}

// sentinel is a Caster installed on the tape before Forward.
type sentinel struct{}

func (*sentinel) CastInput(_ autograd.Op, in dtype.DType) dtype.DType { return in }

func TestForward(t *testing.T) {
	f := newFabric(t, fabric.Config{Precision: mustParse(t, "bf16-mixed")})
	outer := &sentinel{}
	tp := f.Tape()
	tp.Caster = outer
	restored := func(when string) {
		t.Helper()
		if tp.Caster != autograd.Caster(outer) {
			t.Errorf("after Forward %s the tape's Caster is %#v, want the one installed before", when, tp.Caster)
		}
	}
	low := autograd.Param(tensor.FromFloat32([]float32{1.5, -2}, 2).To(dtype.BF16))

	out, err := f.Forward(func(in *autograd.Tape) (*autograd.Var, error) {
		if in != tp {
			t.Errorf("Forward ran fn on another tape than Tape()")
		}
		if in.Caster == nil || in.Caster.CastInput(autograd.OpLinear, dtype.F32) != dtype.BF16 {
			t.Errorf("inside Forward the tape does not autocast linear to bfloat16: %#v", in.Caster)
		}
		return low, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	restored("returned")
	if out.Value.DType() != dtype.F32 || !slices.Equal(out.Value.Float32s(), []float32{1.5, -2}) {
		t.Errorf("Forward output %s %v, want float32 [1.5 -2]", out.Value, out.Value.Float32s())
	}

	// An integer output is not cast.
	ids := autograd.Const(tensor.New(dtype.I64, 3))
	if out, err := f.Forward(func(*autograd.Tape) (*autograd.Var, error) { return ids, nil }); err != nil || out != ids {
		t.Errorf("Forward cast an int64 output: %v, %v", out.Value, err)
	}

	errBoom := errors.New("boom")
	out, err = f.Forward(func(*autograd.Tape) (*autograd.Var, error) { return nil, errBoom })
	if !errors.Is(err, errBoom) || out != nil {
		t.Errorf("Forward of a failing fn returned %v, %v; want nil, its error", out, err)
	}
	restored("the function failed")

	func() {
		defer func() {
			if v := recover(); v != "panic in forward" {
				t.Errorf("recovered %v, want the panic from fn", v)
			}
		}()
		f.Forward(func(*autograd.Tape) (*autograd.Var, error) { panic("panic in forward") })
	}()
	restored("the function panicked")

	// Without an OutputCaster the output keeps its dtype.
	g := newFabric(t, fabric.Config{Precision: &noRoles{}})
	out, err = g.Forward(func(in *autograd.Tape) (*autograd.Var, error) {
		if in.Caster != nil {
			t.Errorf("a plugin without autocast left Caster %#v on the tape", in.Caster)
		}
		return low, nil
	})
	if err != nil || out != low {
		t.Errorf("without an OutputCaster Forward returned %v, %v; want fn's output", out.Value, err)
	}
}

// pair is a module with two parameters and one that never gets a gradient.
type pair struct{ A, B, C *autograd.Var }

func (p *pair) Params() []nn.Param {
	return []nn.Param{{Name: "a", Var: p.A}, {Name: "b", Var: p.B}, {Name: "c", Var: p.C}}
}
func (p *pair) Children() []nn.Child { return nil }

// newPair returns parameters a = [1 1], b = [1], c = [1] with gradients
// a = [3 4]·k, b = [12]·k (global norm 13·k) and none for c.
func newPair(k float32) *pair {
	one := func(n int) *autograd.Var {
		t := tensor.New(dtype.F32, n)
		t.Fill(1)
		return autograd.Param(t)
	}
	p := &pair{A: one(2), B: one(1), C: one(1)}
	setGrads(p, k)
	return p
}

func setGrads(p *pair, k float32) {
	p.A.Grad = tensor.FromFloat32([]float32{3 * k, 4 * k}, 2)
	p.B.Grad = tensor.FromFloat32([]float32{12 * k}, 1)
}

func near(got, want float64) bool { return math.Abs(got-want) <= 1e-6*math.Max(1, math.Abs(want)) }

func TestClipGradNorm(t *testing.T) {
	m := newPair(1)
	f := newFabric(t, fabric.Config{Precision: &noRoles{}})
	if err := f.Setup(m, optim.NewSGD(nn.Parameters(m), 1)); err != nil {
		t.Fatal(err)
	}
	norm, err := f.ClipGradNorm(100)
	if err != nil || norm != 13 {
		t.Fatalf("ClipGradNorm(100) = %v, %v; want 13", norm, err)
	}
	if g := m.A.Grad.Float32s(); g[0] != 3 || g[1] != 4 || m.B.Grad.Float32s()[0] != 12 {
		t.Errorf("ClipGradNorm above the norm changed the gradients: %v %v", g, m.B.Grad.Float32s())
	}
	norm, err = f.ClipGradNorm(6.5)
	if err != nil || norm != 13 {
		t.Fatalf("ClipGradNorm(6.5) = %v, %v; want the norm before clipping, 13", norm, err)
	}
	// By hand: every gradient is multiplied by 6.5/13 = 0.5.
	a, b := m.A.Grad.Float64s(), m.B.Grad.Float64s()
	for i, want := range []float64{1.5, 2, 6} {
		if got := append(a, b...)[i]; !near(got, want) {
			t.Errorf("clipped gradient %d = %v, want %v", i, got, want)
		}
	}
	if n := math.Sqrt(m.A.Grad.Norm()*m.A.Grad.Norm() + m.B.Grad.Norm()*m.B.Grad.Norm()); !near(n, 6.5) {
		t.Errorf("global norm after clipping %v, want 6.5", n)
	}
	if m.C.Grad != nil {
		t.Errorf("ClipGradNorm gave c a gradient")
	}
}

// TestClipGradNormScaled: with a GradScaler, ClipGradNorm unscales first,
// and the following Step does not unscale a second time.
func TestClipGradNormScaled(t *testing.T) {
	const scale = 1024
	m := newPair(scale)
	f := newFabric(t, fabric.Config{Precision: newScaleOnly(scale)})
	if err := f.Setup(m, optim.NewSGD(nn.Parameters(m), 1)); err != nil {
		t.Fatal(err)
	}
	norm, err := f.ClipGradNorm(6.5)
	if err != nil || norm != 13 {
		t.Fatalf("ClipGradNorm(6.5) = %v, %v; want the unscaled norm 13", norm, err)
	}
	// A second clip in the same step sees the unscaled, clipped gradients.
	if norm, err := f.ClipGradNorm(6.5); err != nil || !near(norm, 6.5) {
		t.Errorf("second ClipGradNorm in a step = %v, %v; want 6.5", norm, err)
	}
	skipped, err := f.Step()
	if err != nil || skipped {
		t.Fatalf("Step after ClipGradNorm: skipped %v, %v", skipped, err)
	}
	// SGD at lr 1 from 1 with the clipped gradients 1.5, 2, 6; unscaling
	// twice would have moved the parameters 1024 times less.
	got := append(m.A.Value.Float64s(), m.B.Value.Float64s()...)
	for i, want := range []float64{-0.5, -1, -5} {
		if !near(got[i], want) {
			t.Errorf("parameter %d after the step = %v, want %v", i, got[i], want)
		}
	}
	if c := m.C.Value.Float32s()[0]; c != 1 {
		t.Errorf("c had no gradient but moved to %v", c)
	}
	// The next step unscales again.
	setGrads(m, scale)
	if norm, err := f.ClipGradNorm(100); err != nil || norm != 13 {
		t.Errorf("ClipGradNorm in the next step = %v, %v; want 13", norm, err)
	}
}

// pathRecorder records the module paths its ConvertModule is called with.
type pathRecorder struct{ paths *[]string }

func (pathRecorder) Name() string { return "path-recorder" }
func (r pathRecorder) ConvertModule(path string, _ nn.Module) error {
	*r.paths = append(*r.paths, path)
	return nil
}

var _ precision.ModuleConverter = pathRecorder{}

// TestSetupConverts: Setup converts each module of the model once, with its
// dotted path, in pre-order, as precision.ConvertModule does.
func TestSetupConverts(t *testing.T) {
	want := []string{"", "fc1", "fc2", "norm", "head"}
	var viaHelper, viaSetup []string
	if err := precision.ConvertModule(pathRecorder{&viaHelper}, newMLP()); err != nil {
		t.Fatal(err)
	}
	m := newMLP()
	if err := newFabric(t, fabric.Config{Precision: pathRecorder{&viaSetup}}).Setup(m, optim.NewSGD(nn.Parameters(m), 1)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(viaHelper, want) || !slices.Equal(viaSetup, want) {
		t.Errorf("ConvertModule called for %q by precision.ConvertModule and %q by Setup; want %q", viaHelper, viaSetup, want)
	}
}

// TestClipGradNormAcrossRanks: under ZeRO-2 each rank holds the gradients
// of its chunks only, and ClipGradNorm still returns the global norm, the
// one a single device computes over the whole batch.
func TestClipGradNormAcrossRanks(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	x, y := make([]float64, 8*32), make([]int, 8)
	for i := range x {
		x[i] = rng.NormFloat64()
	}
	for i := range y {
		y[i] = rng.IntN(10)
	}
	norm := func(b data.Batch, f *fabric.Fabric, m models.Model) float64 {
		fabricLoss(t, f, m, b)
		n, err := f.ClipGradNorm(1e9)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// newRank builds the same float64 MLP on every rank (c nil: one device).
	newRank := func(c comm.Communicator) (*fabric.Fabric, models.Model, error) {
		m := models.NewMLP(nn.NewInit(1))
		opt, _ := optim.NewAdamW(nn.Parameters(m), optim.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95})
		cfg := fabric.Config{Precision: precision.Pure{DType: dtype.F64}, Comm: c}
		if c != nil {
			cfg.Strategy = "zero2"
		}
		f, err := fabric.New(cfg)
		if err != nil {
			return nil, nil, err
		}
		return f, m, f.Setup(m, opt)
	}
	whole := data.Batch{X: tensor.FromFloat64(x, 8, 32), Targets: y}
	f, m, err := newRank(nil)
	if err != nil {
		t.Fatal(err)
	}
	single := norm(whole, f, m)
	norms := make([]float64, 2)
	err = comm.Each(local.NewGroup(2, local.Options{}), func(i int, c comm.Communicator) error {
		f, m, err := newRank(c)
		if err != nil {
			return err
		}
		b, err := whole.Share(c.Rank(), c.Size())
		if err != nil {
			return err
		}
		norms[i] = norm(b, f, m)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range norms {
		if math.Abs(n-single) > 1e-12*single {
			t.Errorf("rank %d: norm %v, one device %v", i, n, single)
		}
	}
}

// TestNewNilIs32True: a fabric made without a plugin trains as 32-true,
// Lightning's default precision, bit for bit.
func TestNewNilIs32True(t *testing.T) {
	train := func(f *fabric.Fabric) *models.MLP {
		m := newMLP()
		opt, err := optim.NewAdamW(nn.Parameters(m), adamW)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Setup(m, opt); err != nil {
			t.Fatal(err)
		}
		for _, b := range batches(3) {
			fabricLoss(t, f, m, b)
			if _, err := f.Step(); err != nil {
				t.Fatal(err)
			}
		}
		return m
	}
	sameParams(t, train(newFabric(t, fabric.Config{Precision: mustParse(t, "32-true")})), train(newFabric(t, fabric.Config{})))
}

// TestGlobalLossGathersOneNumberARow: on 2 ddp ranks the reported loss of
// a global batch is one device's bit for bit (float32 and bfloat16
// logits), and computing it gathers one float32 per row, not the rows'
// logits.
func TestGlobalLossGathersOneNumberARow(t *testing.T) {
	for _, spec := range []string{"32-true", "bf16-true"} {
		global := batches(1)[0]
		one, m := mlpFabric(t, 1, spec, "", nil)
		want, err := one.EvalLoss(context.Background(), m, global)
		if err != nil {
			t.Fatal(err)
		}
		onRanks(t, 2, func(r int, c comm.Communicator) error {
			f, m := mlpFabric(t, 1, spec, "ddp", c)
			before := c.Stats().Bytes[comm.Key{Collective: comm.AllGather}]
			got, err := f.EvalLoss(context.Background(), m, rankShare(t, f, global))
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%s rank %d: loss %v, one device %v", spec, r, got, want)
			}
			rows := int64(global.X.Dim(0) / 2)
			if sent := c.Stats().Bytes[comm.Key{Collective: comm.AllGather}] - before; sent != 4*rows {
				return fmt.Errorf("%s rank %d: gathered %d bytes for the loss, want %d (a float32 per row)", spec, r, sent, 4*rows)
			}
			return nil
		})
	}
}

// newFabric is fabric.New(cfg), failing the test on an error.
func newFabric(t testing.TB, cfg fabric.Config) *fabric.Fabric {
	t.Helper()
	f, err := fabric.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// rankShare is f's rank's share of the global batch, as a Loader cuts it
// (global itself on one device).
func rankShare(t testing.TB, f *fabric.Fabric, global data.Batch) data.Batch {
	t.Helper()
	if f.Rank() == nil {
		return global
	}
	b, err := global.Share(f.Rank().Comm().Rank(), f.Rank().Comm().Size())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

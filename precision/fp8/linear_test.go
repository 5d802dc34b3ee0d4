package fp8

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// converter is the module-conversion role, as package precision sees it.
type converter interface {
	ConvertModule(path string, m nn.Module) error
}

var (
	_ converter = (*Delayed)(nil)
	_ converter = (*Current)(nil)
	_ converter = (*MX)(nil)
)

// exactValues returns n values ±m·2^-j with m among the first mantissas of
// mantissas and j < octaves; the first is 1.75, the largest.
func exactValues(rng *rand.Rand, n, mantissas, octaves int, step float64) []float32 {
	vals := make([]float32, n)
	for i := range vals {
		v := math.Ldexp(1+step*float64(rng.IntN(mantissas)), -rng.IntN(octaves))
		if rng.IntN(2) == 0 {
			v = -v
		}
		vals[i] = float32(v)
	}
	vals[0] = 1.75
	return vals
}

// exactLinear returns the inputs of a Linear (M=48, in=64, out=32) whose
// FP8 casts are exact once scales come from their amax (1.75 everywhere, so
// per-tensor scales are powers of two) or from MX blocks: x and w have
// 4-bit mantissas, dy 3-bit ones. Row 1 of dy is 1.75 and values near
// 2^-20, within E5M2's range of 1.75 but not E4M3's, so a gradient cast
// to the wrong format shows in dx.
func exactLinear() (x, w, b, dy *tensor.Tensor) {
	rng := rand.New(rand.NewPCG(7, 8))
	const m, in, out = 48, 64, 32
	x = tensor.FromFloat32(exactValues(rng, m*in, 7, 3, 1.0/8), m, in)
	w = tensor.FromFloat32(exactValues(rng, out*in, 7, 3, 1.0/8), out, in)
	bias := make([]float32, out)
	for i := range bias {
		bias[i] = float32(rng.NormFloat64())
	}
	b = tensor.FromFloat32(bias, out)
	g := exactValues(rng, m*out, 4, 4, 1.0/4)
	for i := out + 1; i < 2*out; i++ {
		g[i] = float32(math.Ldexp(float64(g[i]), -20))
	}
	g[out] = 1.75
	dy = tensor.FromFloat32(g, m, out)
	return x, w, b, dy
}

// step runs l forward on x and backward from dy, returning y and the
// gradients of x, l.Weight and l.Bias, which it then clears.
func step(tp *autograd.Tape, l *nn.Linear, x, dy *tensor.Tensor) (y, dx, dw, db *tensor.Tensor, err error) {
	xv := autograd.Param(x.Clone())
	out := l.Forward(tp, xv)
	// loss = Σ out·dy, whose gradient with respect to out is dy.
	loss := tp.Record(tensor.Scalar(dtype.F32, 0), func(*tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{dy.Clone()} // the tape takes the gradient
	}, out)
	if err := tp.Backward(loss); err != nil {
		return nil, nil, nil, nil, err
	}
	dw, db = l.Weight.Grad, l.Bias.Grad
	l.Weight.Grad, l.Bias.Grad = nil, nil
	return out.Value, xv.Grad, dw, db, nil
}

func sameTensor(t *testing.T, what string, got, want *tensor.Tensor) {
	t.Helper()
	if got.DType() != want.DType() || !got.SameShape(want) {
		t.Errorf("%s is %v, want %v", what, got, want)
		return
	}
	if !bytes.Equal(got.Data(), want.Data()) {
		g, w := got.Float32s(), want.Float32s()
		for i := range g {
			if g[i] != w[i] && !(g[i] != g[i] && w[i] != w[i]) {
				t.Errorf("%s[%d] = %v, want %v", what, i, g[i], w[i])
				return
			}
		}
	}
}

func newLinear(w, b *tensor.Tensor) *nn.Linear {
	return &nn.Linear{Weight: autograd.Param(w.Clone()), Bias: autograd.Param(b.Clone())}
}

// TestLinearExact checks the three GEMMs and the format of each operand:
// on values every cast keeps exactly, an FP8 Linear computes what the
// float32 Linear does, bit for bit (the same GEMM sums in the same order).
// Delayed scaling is checked at its second step, the first whose scales
// come from an amax.
func TestLinearExact(t *testing.T) {
	x, w, b, dy := exactLinear()
	for _, c := range []struct {
		plugin converter
		warmup int
	}{
		{NewDelayed(), 1},
		{NewCurrent(), 0},
		{&MX{Format: Hybrid}, 0},
	} {
		name := c.plugin.(interface{ Name() string }).Name()
		t.Run(name, func(t *testing.T) {
			var tp autograd.Tape
			ref := newLinear(w, b)
			wantY, wantDX, wantDW, wantDB, err := step(&tp, ref, x, dy)
			if err != nil {
				t.Fatal(err)
			}
			l := newLinear(w, b)
			if err := c.plugin.ConvertModule("fc", l); err != nil {
				t.Fatal(err)
			}
			if l.GEMM == nil {
				t.Fatal("ConvertModule left a 64→32 Linear alone")
			}
			for range c.warmup {
				if _, _, _, _, err := step(&tp, l, x, dy); err != nil {
					t.Fatal(err)
				}
			}
			y, dx, dw, db, err := step(&tp, l, x, dy)
			if err != nil {
				t.Fatal(err)
			}
			sameTensor(t, "y", y, wantY)
			sameTensor(t, "dx", dx, wantDX)
			sameTensor(t, "dw", dw, wantDW)
			sameTensor(t, "db", db, wantDB)
		})
	}
}

// TestLinearDTypes checks where results are rounded: y to the autocast
// dtype of linear (else x's), gradients to the dtypes of x, w and b.
func TestLinearDTypes(t *testing.T) {
	x, w, b, dy := exactLinear()
	var tp autograd.Tape
	wantY, _, _, _, err := step(&tp, newLinear(w, b), x, dy)
	if err != nil {
		t.Fatal(err)
	}

	l := newLinear(w, b)
	if err := NewCurrent().ConvertModule("fc", l); err != nil {
		t.Fatal(err)
	}
	tp.Caster = bf16Linear{}
	y, dx, dw, db, err := step(&tp, l, x, dy)
	if err != nil {
		t.Fatal(err)
	}
	sameTensor(t, "y under bf16 autocast", y, wantY.To(dtype.BF16))
	for _, g := range []struct {
		name string
		t    *tensor.Tensor
	}{{"dx", dx}, {"dw", dw}, {"db", db}} {
		if g.t.DType() != dtype.F32 {
			t.Errorf("%s of float32 tensors is %s", g.name, g.t.DType())
		}
	}

	// bf16 everywhere, no autocast (bf16-true+fp8): bias added in float32
	// and one rounding of the sum.
	tp.Caster = nil
	l = newLinear(w.To(dtype.BF16), b.To(dtype.BF16))
	if err := NewCurrent().ConvertModule("fc", l); err != nil {
		t.Fatal(err)
	}
	y, dx, dw, db, err = step(&tp, l, x.To(dtype.BF16), dy)
	if err != nil {
		t.Fatal(err)
	}
	yNoBias := tensor.Linear(x, w, nil)
	sameTensor(t, "y in bf16", y, tensor.AddBroadcast(yNoBias, b.To(dtype.BF16), 1).To(dtype.BF16))
	for _, g := range []struct {
		name string
		t    *tensor.Tensor
	}{{"dx", dx}, {"dw", dw}, {"db", db}} {
		if g.t.DType() != dtype.BF16 {
			t.Errorf("%s of bf16 tensors is %s", g.name, g.t.DType())
		}
	}
}

// bf16Linear autocasts linear to bf16, as bf16-mixed does.
type bf16Linear struct{}

func (bf16Linear) CastInput(op autograd.Op, in dtype.DType) dtype.DType {
	if op == autograd.OpLinear {
		return dtype.BF16
	}
	return in
}

// TestConvertFilter checks which Linears are converted: the MLP's fc1
// (32→64) and fc2 (64→64), not its head (64→10, out not a multiple of 16),
// whose arithmetic stays the tape's.
func TestConvertFilter(t *testing.T) {
	for _, p := range []converter{NewDelayed(), NewCurrent(), NewMX()} {
		m := models.NewMLP(nn.NewInit(1))
		for range 2 { // converting twice changes nothing
			var err error
			nn.Walk(m, func(path string, mod nn.Module) {
				if err == nil {
					err = p.ConvertModule(path, mod)
				}
			})
			if err != nil {
				t.Fatalf("%T: %v", p, err)
			}
		}
		if m.FC1.GEMM == nil || m.FC2.GEMM == nil {
			t.Errorf("%T left fc1 or fc2 unconverted", p)
		}
		if m.Head.GEMM != nil {
			t.Errorf("%T converted head, a 64→10 Linear", p)
		}
	}
}

// TestConvertErrors checks what conversion refuses: a Linear another plugin
// converted, two Linears under one path, and bad settings.
func TestConvertErrors(t *testing.T) {
	_, w, b, _ := exactLinear()
	l := newLinear(w, b)
	if err := NewDelayed().ConvertModule("fc", l); err != nil {
		t.Fatal(err)
	}
	if err := NewMX().ConvertModule("fc", l); err == nil || !strings.Contains(err.Error(), "already replaced") {
		t.Errorf("a second plugin converting the same Linear: error %v, want one saying its arithmetic is already replaced", err)
	}
	p := NewDelayed()
	if err := p.ConvertModule("fc", newLinear(w, b)); err != nil {
		t.Fatal(err)
	}
	if err := p.ConvertModule("fc", newLinear(w, b)); err == nil {
		t.Error("one Delayed plugin converted two Linears under one path; their scaling state would be shared")
	}
	bad := NewDelayed()
	bad.HistoryLen = 0
	if err := bad.ConvertModule("fc", newLinear(w, b)); err == nil {
		t.Error("HistoryLen 0 accepted")
	}
	if err := (&Current{Format: Format{Forward: dtype.E4M3FN, Backward: dtype.BF16}}).ConvertModule("fc", newLinear(w, b)); err == nil {
		t.Error("a bf16 gradient format accepted")
	}
	if err := (&MX{}).ConvertModule("", models.NewMLP(nn.NewInit(1))); err == nil {
		t.Error("a zero Format accepted")
	}
	// A Delayed built as a literal works too.
	lit := &Delayed{Format: E4M3, HistoryLen: 16}
	if err := lit.ConvertModule("fc", newLinear(w, b)); err != nil {
		t.Errorf("Delayed literal: %v", err)
	}
}

package quant_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/precision"
	"github.com/weftml/weft/precision/fp8"
	"github.com/weftml/weft/precision/precisiontest"
	"github.com/weftml/weft/precision/quant"
	"github.com/weftml/weft/tensor"
)

// converter is the module-conversion role, as package precision sees it.
type converter interface {
	Name() string
	ConvertModule(path string, m nn.Module) error
}

var (
	_ converter = (*quant.FourBit)(nil)
	_ converter = (*quant.Int8)(nil)
	_ converter = (*quant.LoRA)(nil)
)

func randn(rng *rand.Rand, scale float64, shape ...int) *tensor.Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64() * scale)
	}
	return tensor.FromFloat32(vals, shape...)
}

// step runs l on x (a trainable input) and backward from loss Σ y·dy; it
// returns y and the gradient of x.
func step(t *testing.T, tp *autograd.Tape, l *nn.Linear, x, dy *tensor.Tensor) (y, dx *tensor.Tensor) {
	t.Helper()
	xv := autograd.Param(x.Clone())
	out := l.Forward(tp, xv)
	loss := tp.Record(tensor.Scalar(dtype.F32, 0), func(*tensor.Tensor) []*tensor.Tensor { return []*tensor.Tensor{dy.Clone()} }, out) // the tape takes the gradient
	if err := tp.Backward(loss); err != nil {
		t.Fatal(err)
	}
	return out.Value, xv.Grad
}

func sameBytes(t *testing.T, what string, got, want *tensor.Tensor) {
	t.Helper()
	if got.DType() != want.DType() || !got.SameShape(want) || !bytes.Equal(got.Data(), want.Data()) {
		t.Errorf("%s differs: %v, want %v", what, got, want)
	}
}

// TestFourBitLinear checks a converted Linear: the weight frozen and gone
// from Params, the old Var holding only the codes, y = x·deq(W)ᵀ + b with
// deq(W) in the compute dtype, and gradients for x and b only.
func TestFourBitLinear(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	l := nn.NewLinear(nn.NewInit(1), 64, 32, true)
	w, b := l.Weight, l.Bias
	q := quant.Quantize4(quant.NF4, w.Value, quant.DefaultBlockSize, true)
	p := quant.NewFourBit(quant.NF4, true)
	if err := p.ConvertModule("fc", l); err != nil {
		t.Fatal(err)
	}
	if l.Weight != nil || len(l.Params()) != 1 || l.Params()[0].Var != b {
		t.Fatalf("after conversion the Linear has weight %v and params %v; want no weight, the bias only", l.Weight, l.Params())
	}
	if w.Value.DType() != dtype.I8 || w.Value.Bytes() != 64*32/2 || w.Grad != nil {
		t.Errorf("the old weight Var holds %v (%d bytes); want the 1024 bytes of packed codes", w.Value, w.Value.Bytes())
	}
	held, ok := quant.WeightOf(l)
	if !ok || held.Bytes() != q.Bytes() {
		t.Fatalf("WeightOf: %v, %v", held, ok)
	}
	gemm := l.GEMM
	if err := p.ConvertModule("fc", l); err != nil || l.GEMM != gemm {
		t.Errorf("converting twice: %v, GEMM replaced %v", err, l.GEMM != gemm)
	}

	var tp autograd.Tape
	x, dy := randn(rng, 1, 2, 5, 64), randn(rng, 1, 2, 5, 32)
	y, dx := step(t, &tp, l, x, dy)
	deq := q.Dequantize(dtype.F32)
	sameBytes(t, "y", y, tensor.Linear(x, deq, b.Value))
	sameBytes(t, "dx", dx, tensor.MatMul(dy.Reshape(10, 32), deq, false, false).Reshape(2, 5, 64))
	sameBytes(t, "db", b.Grad, tensor.ReduceBroadcast(dy.Reshape(10, 32), []int{32}, 1, dtype.F32))
	if w.Grad != nil {
		t.Error("the frozen weight got a gradient")
	}

	// Under bf16 autocast the weight is dequantized to bf16.
	b.Grad = nil
	tp.Caster = bf16Linear{}
	y, dx = step(t, &tp, l, x, dy)
	sameBytes(t, "y under bf16 autocast", y, tensor.Linear(x.To(dtype.BF16), q.Dequantize(dtype.BF16), b.Value.To(dtype.BF16)))
	if dx.DType() != dtype.F32 || b.Grad.DType() != dtype.F32 {
		t.Errorf("gradients of float32 x and b are %s and %s", dx.DType(), b.Grad.DType())
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

// convert runs p's conversion over every module of m, as the fabric does.
func convert(t *testing.T, p precision.Plugin, m nn.Module) {
	t.Helper()
	if err := precision.ConvertModule(p, m); err != nil {
		t.Fatal(err)
	}
}

// TestSkip checks which Linears are quantized: all but the output head by
// default, or those Skip leaves.
func TestSkip(t *testing.T) {
	m := models.NewMLP(nn.NewInit(1))
	convert(t, quant.NewFourBit(quant.FP4, false), m)
	if m.FC1.Weight != nil || m.FC2.Weight != nil || m.Head.Weight == nil || m.Head.GEMM != nil {
		t.Errorf("fp4 with the default Skip: fc1, fc2 quantized %v, %v; head %v; want the head alone left", m.FC1.Weight == nil, m.FC2.Weight == nil, m.Head.GEMM == nil)
	}
	m = models.NewMLP(nn.NewInit(1))
	p := quant.NewInt8(false)
	p.Skip = []string{"fc*"}
	convert(t, p, m)
	if m.FC1.Weight == nil || m.FC2.Weight == nil || m.Head.Weight != nil {
		t.Error("Skip fc* quantized the wrong Linears")
	}
}

func TestConvertErrors(t *testing.T) {
	newLinear := func() *nn.Linear { return nn.NewLinear(nn.NewInit(1), 32, 16, true) }
	for _, c := range []struct {
		name  string
		steps []converter
		want  string
	}{
		{"after fp8", []converter{fp8.NewCurrent(), quant.NewFourBit(quant.NF4, false)}, "already replaced"},
		{"after lora", []converter{quant.NewLoRA(4, 8, "fc"), quant.NewInt8(false)}, "before adding LoRA"},
		{"two quantizers", []converter{quant.NewInt8(true), quant.NewFourBit(quant.NF4, true)}, "already replaced"},
		{"bad pattern", []converter{&quant.FourBit{Codebook: quant.NF4, BlockSize: 64, Skip: []string{"[fc"}}}, "pattern"},
		{"block size", []converter{&quant.FourBit{Codebook: quant.NF4}}, "block size"},
		{"threshold", []converter{&quant.Int8{Threshold: -1}}, "threshold"},
		{"rank", []converter{quant.NewLoRA(0, 8, "fc")}, "rank"},
	} {
		l := newLinear()
		var err error
		for _, p := range c.steps {
			if err = p.ConvertModule("fc", l); err != nil {
				break
			}
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
	p := quant.NewLoRA(4, 8, "fc")
	if err := p.ConvertModule("fc", newLinear()); err != nil {
		t.Fatal(err)
	}
	if err := p.ConvertModule("fc", newLinear()); err == nil {
		t.Error("one LoRA plugin adapted two Linears under one path")
	}
}

// TestStorageCast converts the reference gpt with bf16-true+nf4-dq: the
// storage cast makes every remaining parameter bf16 and leaves the 4-bit
// weights as quantized, which take less than 30% of their bf16 bytes.
func TestStorageCast(t *testing.T) {
	g := models.NewGPT(nn.NewInit(3), models.ReferenceGPT)
	want := map[*nn.Linear]*quant.Blockwise{}
	var old []*autograd.Var
	for _, blk := range g.Blocks {
		for _, l := range []*nn.Linear{blk.Attn.QKV, blk.Attn.Proj, blk.FC, blk.Out} {
			want[l] = quant.Quantize4(quant.NF4, l.Weight.Value.Clone(), quant.DefaultBlockSize, true)
			old = append(old, l.Weight)
		}
	}
	p, err := precision.Parse("bf16-true+nf4-dq", precision.Options{})
	if err != nil {
		t.Fatal(err)
	}
	convert(t, p, g)
	for _, np := range nn.Parameters(g) {
		if np.Var.Value.DType() != dtype.BF16 {
			t.Errorf("%s is %s after bf16-true", np.Path, np.Var.Value.DType())
		}
	}
	var quantized, bf16 int
	for l, q := range want {
		w, ok := quant.WeightOf(l)
		if !ok {
			t.Fatal("a block Linear is not quantized")
		}
		got := w.(*quant.Blockwise)
		if !bytes.Equal(got.Codes.Data(), q.Codes.Data()) || !bytes.Equal(got.Nested.Codes, q.Nested.Codes) {
			t.Error("the storage cast changed a quantized weight")
		}
		quantized += w.Bytes()
		bf16 += dtype.BF16.StorageBytes(len(q.Dequantize(dtype.F32).Float32s()))
	}
	for _, v := range old {
		if v.Value.DType() != dtype.I8 {
			t.Errorf("an old weight Var is %s after the cast, want the int8 codes", v.Value.DType())
		}
	}
	ratio := float64(quantized) / float64(bf16)
	t.Logf("4-bit weights: %d bytes, %.1f%% of bf16's %d", quantized, 100*ratio, bf16)
	if ratio > 0.30 {
		t.Errorf("quantized weights take %.1f%% of their bf16 bytes, want ≤ 30%%", 100*ratio)
	}
	tp := &autograd.Tape{}
	exit := precision.Enter(p, tp)
	logits, err := g.Forward(tp, data.Batch{Tokens: make([]int, 2*8), Shape: []int{2, 8}})
	exit.Exit()
	if err != nil || logits.Value.DType() != dtype.BF16 || logits.Value.HasNonFinite() {
		t.Fatalf("forward: %v, logits %v", err, logits)
	}
}

// TestInt8Linear checks "int8" against float32 on an input with an
// outlier feature, and "int8-training"'s gradients, which reach the weight.
func TestInt8Linear(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	x, dy := randn(rng, 1, 16, 48), randn(rng, 1, 16, 24)
	xs := x.Float32s()
	xs[3*48+7] = 25 // an outlier in feature 7
	x = tensor.FromFloat32(xs, 16, 48)
	ref := nn.NewLinear(nn.NewInit(7), 48, 24, true)
	var tp autograd.Tape
	wantY, wantDX := step(t, &tp, ref, x, dy)
	wantDW := ref.Weight.Grad
	relErr := func(got, want *tensor.Tensor) float64 {
		var d, s float64
		w := want.Float64s()
		for i, g := range got.Float64s() {
			d, s = max(d, math.Abs(g-w[i])), max(s, math.Abs(w[i]))
		}
		return d / s
	}
	for _, training := range []bool{false, true} {
		l := nn.NewLinear(nn.NewInit(7), 48, 24, true)
		w := l.Weight
		p := quant.NewInt8(training)
		if err := p.ConvertModule("fc", l); err != nil {
			t.Fatal(err)
		}
		if frozen := l.Weight == nil; frozen == training {
			t.Errorf("%s: weight frozen %v", p.Name(), frozen)
		}
		y, dx := step(t, &tp, l, x, dy)
		ey, edx := relErr(y, wantY), relErr(dx, wantDX)
		t.Logf("%s: relative error y %.3g, dx %.3g", p.Name(), ey, edx)
		if ey > 0.01 || edx > 0.01 {
			t.Errorf("%s: relative error y %.3g, dx %.3g; want < 1%%", p.Name(), ey, edx)
		}
		if training {
			if edw := relErr(w.Grad, wantDW); edw > 0.02 {
				t.Errorf("int8-training: relative error of dw %.3g, want < 2%%", edw)
			}
		} else if w.Grad != nil {
			t.Error("int8: the frozen weight got a gradient")
		}
	}
}

// TestLoRAConformance runs package precision's conformance suite on LoRA,
// which keeps every parameter of the model trainable. (The quantizing
// plugins freeze weights, which the suite does not yet allow.)
func TestLoRAConformance(t *testing.T) {
	precisiontest.Run(t, func() precision.Plugin { return quant.NewLoRA(4, 8, "fc*") })
}

// TestLoRAStartsAsBase checks that a fresh adapter (B = 0) changes no bit
// of the output, over a plain Linear and over a quantized one.
func TestLoRAStartsAsBase(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	x := randn(rng, 1, 3, 4, 32)
	for _, quantize := range []bool{false, true} {
		l := nn.NewLinear(nn.NewInit(1), 32, 48, true)
		if quantize {
			if err := quant.NewFourBit(quant.NF4, true).ConvertModule("blocks.0.fc", l); err != nil {
				t.Fatal(err)
			}
		}
		var tp autograd.Tape
		want := l.Forward(&tp, autograd.Const(x)).Value
		p := quant.NewLoRA(8, 16, "blocks.*.fc")
		if err := p.ConvertModule("blocks.0.fc", l); err != nil {
			t.Fatal(err)
		}
		if ps := p.Params(); len(ps) != 2 || ps[0].Path != "blocks.0.fc.lora_A.weight" || ps[1].Var.Value.Norm() != 0 || ps[0].Var.Value.Norm() == 0 {
			t.Fatalf("adapters %v: want lora_A random and lora_B zero", ps)
		}
		sameBytes(t, "output with a fresh adapter", l.Forward(&tp, autograd.Const(x)).Value, want)
	}
}

// TestLoRAGradient checks the adapter's gradients in float64 by central
// differences, over an NF4 weight, with B made non-zero; the frozen
// weight gets none.
func TestLoRAGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	l := nn.NewLinear(nn.NewInit(11), 12, 8, true)
	w := l.Weight
	nf4 := &quant.FourBit{Codebook: quant.NF4, Double: true, BlockSize: 16}
	lora := quant.NewLoRA(3, 6, "fc")
	for _, p := range []converter{nf4, lora} {
		if err := p.ConvertModule("fc", l); err != nil {
			t.Fatal(err)
		}
	}
	l.Bias.Value = l.Bias.Value.To(dtype.F64)
	a, b := lora.Params()[0].Var, lora.Params()[1].Var
	a.Value, b.Value = a.Value.To(dtype.F64), randn(rng, 0.5, 8, 3).To(dtype.F64)
	x, r := randn(rng, 1, 5, 12).To(dtype.F64), randn(rng, 1, 5, 8).To(dtype.F64)
	var tp autograd.Tape
	loss := func() *autograd.Var {
		y := l.Forward(&tp, autograd.Param(x))
		return tp.Record(tensor.Scalar(dtype.F64, sumProduct(y.Value, r)), func(*tensor.Tensor) []*tensor.Tensor { return []*tensor.Tensor{r.Clone()} }, y) // the tape takes the gradient
	}
	if err := tp.Backward(loss()); err != nil {
		t.Fatal(err)
	}
	if w.Grad != nil || a.Grad == nil || b.Grad == nil || l.Bias.Grad == nil {
		t.Fatalf("gradients: frozen weight %v, A %v, B %v, bias %v; want all but the weight's", w.Grad, a.Grad, b.Grad, l.Bias.Grad)
	}
	tp.NoGrad = true
	const h = 1e-6
	for _, v := range []*autograd.Var{a, b} {
		vals, grad := v.Value.Float64s(), v.Grad.Float64s()
		for i := range vals {
			at := func(d float64) float64 {
				p := append([]float64(nil), vals...)
				p[i] += d
				v.Value = tensor.FromFloat64(p, v.Value.Shape()...)
				return loss().Value.Float64s()[0]
			}
			fd := (at(h) - at(-h)) / (2 * h)
			if math.Abs(fd-grad[i]) > 1e-6*(1+math.Abs(fd)) {
				t.Errorf("d loss/d %v[%d]: autograd %v, central difference %v", v.Value.Shape(), i, grad[i], fd)
			}
		}
		v.Value = tensor.FromFloat64(vals, v.Value.Shape()...)
	}
}

// sumProduct returns Σ a·b in float64.
func sumProduct(a, b *tensor.Tensor) float64 {
	var s float64
	bs := b.Float64s()
	for i, v := range a.Float64s() {
		s += v * bs[i]
	}
	return s
}

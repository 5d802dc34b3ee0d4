package models_test

import (
	"math"
	"testing"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/dtype"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// TestLlamaGradients: the reference llama (grouped-query attention,
// rotary embeddings, RMSNorm, SwiGLU) in float64 gives every parameter the
// gradient of its loss that central differences give, on a few elements
// of each.
func TestLlamaGradients(t *testing.T) {
	m := models.NewLlama(nn.NewInit(3), models.ReferenceLlama)
	nn.Walk(m, func(_ string, mod nn.Module) { nn.CastOwn(mod, dtype.F64) })
	b := data.Batch{Shape: []int{2, 5}}
	for i := range 10 {
		b.Tokens, b.Targets = append(b.Tokens, i*7%48), append(b.Targets, (i*5+3)%48)
	}
	loss := func(tp *autograd.Tape) *autograd.Var {
		logits, err := m.Forward(tp, b)
		if err != nil {
			t.Fatal(err)
		}
		l, err := tp.CrossEntropy(logits, b.Targets)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	var tp autograd.Tape
	if err := tp.Backward(loss(&tp)); err != nil {
		t.Fatal(err)
	}
	at := func() float64 { return loss(&autograd.Tape{NoGrad: true}).Value.Item() }
	const h = 1e-6
	for _, p := range nn.Parameters(m) {
		vals, grad := p.Var.Value.Float64s(), p.Var.Grad.Float64s()
		for _, j := range []int{0, len(vals) / 3, len(vals) - 1} {
			x := vals[j]
			vals[j] = x + h
			p.Var.Value.CopyFrom(tensor.FromFloat64(vals, p.Var.Value.Shape()...))
			hi := at()
			vals[j] = x - h
			p.Var.Value.CopyFrom(tensor.FromFloat64(vals, p.Var.Value.Shape()...))
			lo := at()
			vals[j] = x
			p.Var.Value.CopyFrom(tensor.FromFloat64(vals, p.Var.Value.Shape()...))
			want := (hi - lo) / (2 * h)
			if d := math.Abs(grad[j] - want); d > 1e-6*max(math.Abs(want), math.Abs(grad[j]))+1e-9 {
				t.Errorf("%s[%d]: backward %.10g, finite difference %.10g", p.Path, j, grad[j], want)
			}
		}
	}
}

package models

import (
	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/nn"
)

// MLP is fc1 → GELU → fc2 → norm → GELU → head over 32 features, 10 classes.
type MLP struct {
	FC1  *nn.Linear    // 32 -> 64
	FC2  *nn.Linear    // 64 -> 64
	Norm *nn.LayerNorm // 64
	Head *nn.Linear    // 64 -> 10
}

func NewMLP(init *nn.Init) *MLP {
	return &MLP{
		FC1:  nn.NewLinear(init, 32, 64, true),
		FC2:  nn.NewLinear(init, 64, 64, true),
		Norm: nn.NewLayerNorm(init, 64),
		Head: nn.NewLinear(init, 64, 10, true),
	}
}

func (m *MLP) Forward(tp *autograd.Tape, b data.Batch) (*autograd.Var, error) {
	if err := checkX("mlp", "fc1", b.X, 32); err != nil {
		return nil, err
	}
	x := tp.Const(b.X)           // (B, 32)
	x = m.FC1.ForwardGELU(tp, x) // (B, 64)
	x = m.Norm.Forward(tp, m.FC2.Forward(tp, x))
	x = tp.GELU(x)
	return m.Head.Forward(tp, x), nil // (B, 10)
}

func (m *MLP) Params() []nn.Param { return nil }
func (m *MLP) Children() []nn.Child {
	return []nn.Child{{Name: "fc1", Module: m.FC1}, {Name: "fc2", Module: m.FC2}, {Name: "norm", Module: m.Norm}, {Name: "head", Module: m.Head}}
}

func init() {
	Register(Spec{Name: "mlp", New: func(init *nn.Init) Model { return NewMLP(init) }, Bench: []int{64, 32}, Classes: 10})
}

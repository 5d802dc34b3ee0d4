package models

import (
	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/nn"
)

// MLP784 is the benchmark MLP 784-1024-1024-10 with ReLU: an MNIST-sized
// classifier whose step time is dominated by its GEMMs.
type MLP784 struct {
	FC1  *nn.Linear // 784 -> 1024
	FC2  *nn.Linear // 1024 -> 1024
	Head *nn.Linear // 1024 -> 10
}

func NewMLP784(init *nn.Init) *MLP784 {
	return &MLP784{FC1: nn.NewLinear(init, 784, 1024, true), FC2: nn.NewLinear(init, 1024, 1024, true), Head: nn.NewLinear(init, 1024, 10, true)}
}

func (m *MLP784) Forward(tp *autograd.Tape, b data.Batch) (*autograd.Var, error) {
	if err := checkX("mlp784", "fc1", b.X, 784); err != nil {
		return nil, err
	}
	x := tp.ReLU(m.FC1.Forward(tp, tp.Const(b.X))) // (B, 1024)
	x = tp.ReLU(m.FC2.Forward(tp, x))              // (B, 1024)
	return m.Head.Forward(tp, x), nil              // (B, 10)
}

func (m *MLP784) Params() []nn.Param { return nil }
func (m *MLP784) Children() []nn.Child {
	return []nn.Child{{Name: "fc1", Module: m.FC1}, {Name: "fc2", Module: m.FC2}, {Name: "head", Module: m.Head}}
}

func init() {
	Register(Spec{Name: "mlp784", New: func(init *nn.Init) Model { return NewMLP784(init) }, Bench: []int{64, 784}, Classes: 10})
}

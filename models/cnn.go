package models

import (
	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/nn"
)

// CNN classifies 1×12×12 images into 10 classes:
// conv1 → ReLU → conv2 (stride 2) → ReLU → flatten (C, H, W) → head.
type CNN struct {
	Conv1 *nn.Conv2d // 1 -> 8, 3×3, pad 1
	Conv2 *nn.Conv2d // 8 -> 16, 3×3, stride 2, pad 1
	Head  *nn.Linear // 16·6·6 = 576 -> 10
}

func NewCNN(init *nn.Init) *CNN {
	return &CNN{
		Conv1: nn.NewConv2d(init, 1, 8, 3, 1, 1),
		Conv2: nn.NewConv2d(init, 8, 16, 3, 2, 1),
		Head:  nn.NewLinear(init, 576, 10, true),
	}
}

func (m *CNN) Forward(tp *autograd.Tape, b data.Batch) (*autograd.Var, error) {
	if err := checkX("cnn", "conv1", b.X, 1, 12, 12); err != nil {
		return nil, err
	}
	x := tp.Const(b.X)                  // (B, 1, 12, 12)
	x = tp.ReLU(m.Conv1.Forward(tp, x)) // (B, 8, 12, 12)
	x = tp.ReLU(m.Conv2.Forward(tp, x)) // (B, 16, 6, 6)
	x = tp.Reshape(x, b.X.Dim(0), -1)   // (B, 576)
	return m.Head.Forward(tp, x), nil   // (B, 10)
}

func (m *CNN) Params() []nn.Param { return nil }
func (m *CNN) Children() []nn.Child {
	return []nn.Child{{Name: "conv1", Module: m.Conv1}, {Name: "conv2", Module: m.Conv2}, {Name: "head", Module: m.Head}}
}

func init() {
	Register(Spec{
		Name: "cnn",
		New:  func(init *nn.Init) Model { return NewCNN(init) },
		Data: func(seed uint64, n int, i uint64) data.Batch {
			return data.GlyphBatch(data.GlyphConfig{Seed: seed}, n, i)
		},
		Unit: "images",
		// not the glyphs' 12×12 rendering, random images of its shape
		Bench: []int{32, 1, 12, 12}, Classes: 10,
	})
}

package autograd_test

import (
	"fmt"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/tensor"
)

// A Tape records a forward pass; Backward fills each parameter's Grad.
// For loss = Σ (x·w)² / 2 over a batch of one row, d loss / d w = xᵀ(x·w).
func ExampleTape_Backward() {
	var tp autograd.Tape
	w := autograd.Param(tensor.FromFloat32([]float32{1, 2}, 2, 1))
	x := tp.Const(tensor.FromFloat32([]float32{3, 4}, 1, 2))
	y := tp.MatMul(x, w, false)         // [1 1]: 3·1 + 4·2 = 11
	loss := tp.Scale(tp.Mul(y, y), 0.5) // 60.5
	if err := tp.Backward(loss); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(loss.Value.Item(), w.Grad.Float32s())
	// Output: 60.5 [33 44]
}

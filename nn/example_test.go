package nn_test

import (
	"fmt"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// A module's forward pass records on a tape; its parameters are named by
// their path in the module tree, as in a PyTorch state_dict.
func ExampleLinear() {
	l := nn.NewLinear(nn.NewInit(1), 3, 2, true)
	l.Weight.Value = tensor.FromFloat32([]float32{1, 0, 0, 0, 1, 1}, 2, 3)
	l.Bias.Value = tensor.FromFloat32([]float32{0, 0.5}, 2)
	var tp autograd.Tape
	y := l.Forward(&tp, tp.Const(tensor.FromFloat32([]float32{1, 2, 3}, 1, 3)))
	fmt.Println(y.Value.Float32s())
	for _, p := range nn.Parameters(l) {
		fmt.Println(p.Path, p.Var.Value.Shape())
	}
	// Output:
	// [1 5.5]
	// weight [2 3]
	// bias [2]
}

// Walk visits a model's modules depth first with their paths; Kind names
// their type, as plan and precision rules (kind:Linear) see it.
func ExampleWalk() {
	m := nn.List[nn.Module]{nn.NewLinear(nn.NewInit(1), 4, 4, false), nn.NewLayerNorm(nn.NewInit(1), 4)}
	nn.Walk(m, func(path string, m nn.Module) {
		fmt.Printf("%q %s\n", path, nn.Kind(m))
	})
	// Output:
	// "" List
	// "0" Linear
	// "1" LayerNorm
}

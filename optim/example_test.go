package optim_test

import (
	"fmt"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/optim"
	"github.com/weftml/weft/tensor"
)

// Adam's first step moves every parameter by the learning rate against
// its gradient's sign (m̂/√v̂ = g/|g|, less eps's share), whatever the
// gradient's size, after decoupled weight decay has shrunk them by
// lr·decay (1%); a zero gradient leaves only the decay.
func ExampleAdamW() {
	w := autograd.Param(tensor.FromFloat32([]float32{1, 1, 1}, 3))
	opt, err := optim.NewAdamW([]nn.NamedParam{{Path: "w", Var: w}}, optim.AdamWConfig{LR: 0.1, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	if err != nil {
		fmt.Println(err)
		return
	}
	w.Grad = tensor.FromFloat32([]float32{0.5, -1e-3, 0}, 3)
	opt.Step()
	fmt.Println(w.Value.Float32s(), opt.State("w").Step)
	// Output: [0.89 1.089999 0.99] 1
}

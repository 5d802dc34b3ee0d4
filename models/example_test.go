package models_test

import (
	"fmt"

	"github.com/weftml/weft/models"
	"github.com/weftml/weft/nn"
)

// Every model weft trains is registered by name; its parameters carry
// PyTorch's state_dict paths.
func ExampleNewGPT() {
	g := models.NewGPT(nn.NewInit(1), models.GPTConfig{Layers: 1, Width: 8, Heads: 2, Context: 4, Vocab: 16})
	for _, p := range nn.Parameters(g)[:4] {
		fmt.Println(p.Path, p.Var.Value.Shape())
	}
	fmt.Println(models.Names())
	// Output:
	// tok.weight [16 8]
	// pos.weight [4 8]
	// blocks.0.ln1.weight [8]
	// blocks.0.ln1.bias [8]
	// [bigram cnn gpt hybrid llama mlp mlp784]
}

package hf_test

import (
	"fmt"
	"log"
	"os"
	"slices"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/models"
	"github.com/weftml/weft/models/hf"
	"github.com/weftml/weft/nn"
)

// Save writes a gpt as Hugging Face's GPT-2 folder (config.json and
// model.safetensors, GPT2LMHeadModel's names); Open reads the folder back
// into the model its config.json describes, here the same gpt, with the
// same logits.
func ExampleSave() {
	dir, err := os.MkdirTemp("", "weft-hf")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	cfg := models.GPTConfig{Vocab: 64, Context: 8, Width: 32, Heads: 2, Layers: 2}
	gpt := models.NewGPT(nn.NewInit(1), cfg)
	if err := hf.Save(dir, "gpt2", gpt); err != nil {
		log.Fatal(err)
	}
	c, err := hf.ReadConfig(dir)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.ModelType, c.Architectures, "layers", c.NLayer, "width", c.NEmbd, "vocab", c.VocabSize)

	back, err := hf.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	tokens := data.Batch{Tokens: []int{1, 2, 3, 4, 5, 6, 7, 8}, Shape: []int{1, 8}}
	fmt.Println("same logits:", slices.Equal(logitsOf(gpt, tokens), logitsOf(back, tokens)))
	// Output:
	// gpt2 [GPT2LMHeadModel] layers 2 width 32 vocab 64
	// same logits: true
}

// logitsOf runs m on b without recording gradients.
func logitsOf(m models.Model, b data.Batch) []float64 {
	out, err := m.Forward(&autograd.Tape{NoGrad: true}, b)
	if err != nil {
		log.Fatal(err)
	}
	return out.Value.Float64s()
}

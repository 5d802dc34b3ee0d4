// Package models holds weft's reference models, written like nanoGPT: one
// type per concept, each line of a forward pass one visible op.
package models

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// Batch is one step's input: either a float tensor X (images, features) or
// token ids laid out as Shape, plus one class target per output row.
type Batch struct {
	X       *tensor.Tensor // mlp [B, 32], cnn [B, 1, 12, 12]; nil for gpt
	Tokens  []int          // gpt input ids, Shape [B, T]
	Shape   []int
	Targets []int // one per logits row
}

// Model is a classifier over a batch: Forward returns logits [rows, classes]
// whose rows line up with Batch.Targets.
type Model interface {
	nn.Module
	Forward(tp *autograd.Tape, b Batch) (*autograd.Var, error)
}

// constructors builds each reference model with PyTorch's default init.
var constructors = map[string]func(rng *rand.Rand) Model{
	"mlp":    func(rng *rand.Rand) Model { return NewMLP(rng) },
	"cnn":    func(rng *rand.Rand) Model { return NewCNN(rng) },
	"gpt":    func(rng *rand.Rand) Model { return NewGPT(rng, ReferenceGPT) },
	"hybrid": func(rng *rand.Rand) Model { return NewHybrid(rng, DefaultHybrid) },
	"mlp784": func(rng *rand.Rand) Model { return NewMLP784(rng) },
}

// Names lists the reference models.
func Names() []string {
	names := make([]string, 0, len(constructors))
	for n := range constructors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New builds the reference model called name, initialised from seed.
func New(name string, seed uint64) (Model, error) {
	return build(name, rand.New(rand.NewPCG(seed, 0)))
}

// NewMeta builds the reference model called name on shapes alone (see
// nn.Meta): a plan converts and measures it without memory for weights.
func NewMeta(name string) (Model, error) { return build(name, nn.Meta) }

func build(name string, rng *rand.Rand) (Model, error) {
	c, ok := constructors[name]
	if !ok {
		return nil, fmt.Errorf("unknown model %q (accepted: %s)", name, strings.Join(Names(), ", "))
	}
	return c(rng), nil
}

// Share returns rank r's contiguous 1/n of the batch's rows (sequences for
// token batches); the rows must split evenly.
func (b Batch) Share(r, n int) (Batch, error) {
	rows := len(b.Targets)
	if b.Shape != nil {
		rows = b.Shape[0]
	}
	if rows%n != 0 {
		return Batch{}, fmt.Errorf("a batch of %d rows does not split evenly over %d ranks", rows, n)
	}
	per := rows / n
	var out Batch
	if b.X != nil {
		out.X = tensor.SliceRows(b.X, r*per, per)
	}
	if b.Shape != nil {
		t := b.Shape[1]
		out.Shape = []int{per, t}
		out.Tokens = b.Tokens[r*per*t : (r+1)*per*t]
		out.Targets = b.Targets[r*per*t : (r+1)*per*t]
		return out, nil
	}
	out.Targets = b.Targets[r*per : (r+1)*per]
	return out, nil
}

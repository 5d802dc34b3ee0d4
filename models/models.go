// Package models holds weft's reference models, written like nanoGPT: one
// type per concept, each line of a forward pass one visible op.
package models

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/nn"
)

// Model is a classifier over a batch: Forward returns logits [rows, classes]
// whose rows line up with data.Batch.Targets.
type Model interface {
	nn.Module
	Forward(tp *autograd.Tape, b data.Batch) (*autograd.Var, error)
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

// Package models holds weft's reference models, written like nanoGPT: one
// type per concept, each line of a forward pass one visible op.
package models

import (
	"fmt"
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

// constructors builds each reference model with PyTorch's default init
// distributions.
var constructors = map[string]func(init *nn.Init) Model{
	"mlp":    func(init *nn.Init) Model { return NewMLP(init) },
	"cnn":    func(init *nn.Init) Model { return NewCNN(init) },
	"gpt":    func(init *nn.Init) Model { return NewGPT(init, ReferenceGPT) },
	"llama":  func(init *nn.Init) Model { return NewLlama(init, ReferenceLlama) },
	"hybrid": func(init *nn.Init) Model { return NewHybrid(init, DefaultHybrid) },
	"mlp784": func(init *nn.Init) Model { return NewMLP784(init) },
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
func New(name string, seed uint64) (Model, error) { return build(name, nn.NewInit(seed)) }

// NewMeta builds the reference model called name on shapes alone (see
// nn.Meta): a plan converts and measures it without memory for weights,
// and nn.InitRange fills in any part of a parameter as New(name, seed)
// initialises it.
func NewMeta(name string, seed uint64) (Model, error) { return build(name, nn.Meta(seed)) }

func build(name string, init *nn.Init) (Model, error) {
	c, ok := constructors[name]
	if !ok {
		return nil, fmt.Errorf("unknown model %q (accepted: %s)", name, strings.Join(Names(), ", "))
	}
	return c(init), nil
}

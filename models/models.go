// Package models holds weft's reference models, written like nanoGPT: one
// type per concept, each line of a forward pass one visible op.
package models

import (
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

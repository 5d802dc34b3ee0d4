package models

import (
	"errors"
	"math"

	"github.com/weftml/weft/autograd"
	"github.com/weftml/weft/data"
	"github.com/weftml/weft/nn"
)

// B = batch size, T = sequence length, C = width, V = vocabulary size.

// Bigram predicts each token from the one before it alone, makemore's
// bigram model: tok → head, no attention, so any sequence length goes.
type Bigram struct {
	Tok  *nn.Embedding // (V, C)
	Head *nn.Linear    // C -> V
}

// NewBigram builds a bigram over size.Vocab token ids with embeddings of
// size.Width; the other sizes it has no use for.
func NewBigram(init *nn.Init, size GPTConfig) *Bigram {
	return &Bigram{Tok: nn.NewEmbedding(init, size.Vocab, size.Width), Head: nn.NewLinear(init, size.Width, size.Vocab, true)}
}

func (m *Bigram) Forward(tp *autograd.Tape, b data.Batch) (*autograd.Var, error) {
	if err := checkTokens("bigram", b, math.MaxInt, m.Tok); err != nil {
		return nil, err
	}
	bs, t := b.Shape[0], b.Shape[1]
	x, err := m.Tok.Forward(tp, b.Tokens, bs*t) // (B·T, C)
	if err != nil {
		return nil, err
	}
	return m.Head.Forward(tp, x), nil // (B·T, V)
}

func (m *Bigram) Params() []nn.Param { return nil }
func (m *Bigram) Children() []nn.Child {
	return []nn.Child{{Name: "tok", Module: m.Tok}, {Name: "head", Module: m.Head}}
}

func init() {
	Register(Spec{
		Name: "bigram",
		New:  func(init *nn.Init) Model { return NewBigram(init, ReferenceGPT) },
		LM:   func(init *nn.Init, size GPTConfig) Model { return NewBigram(init, size) },
		CheckSize: func(size GPTConfig) error {
			if size.Width < 1 || size.Context < 2 {
				return errors.New("width must be positive and context at least 2")
			}
			return nil
		},
		Bench: []int{8, 16}, Classes: ReferenceGPT.Vocab,
		// no tensor-parallel plan: the model is two small matrices
	})
}

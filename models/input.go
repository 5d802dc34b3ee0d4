package models

import (
	"fmt"
	"slices"
	"strings"

	"github.com/weftml/weft/data"
	"github.com/weftml/weft/nn"
	"github.com/weftml/weft/tensor"
)

// checkX is nil if x is [B, want...] with B at least 1; else an error
// naming the module, by its path in model, that takes x, and both shapes.
// Checked before the forward pass, since a kernel cannot say which layer
// it computes.
func checkX(model, module string, x *tensor.Tensor, want ...int) error {
	var got []int
	if x != nil {
		got = x.Shape()
		if len(got) == len(want)+1 && got[0] >= 1 && slices.Equal(got[1:], want) {
			return nil
		}
	}
	// A copy: want itself must not escape, or every step allocates it.
	shape := "[B " + strings.Trim(fmt.Sprint(slices.Clone(want)), "[]") + "]"
	if x == nil {
		return fmt.Errorf("%s: %s takes X of shape %s; the batch has no X", model, module, shape)
	}
	return fmt.Errorf("%s: %s takes X of shape %s; the batch's X is %v", model, module, shape, got)
}

// checkTokens is nil if b holds B·T tokens shaped [B, T], both at least
// 1, with T at most context. A model built on shapes alone (its embedding
// table tok is meta) also takes a batch of the shape alone, as a plan
// predicts a step's peak without any ids.
func checkTokens(model string, b data.Batch, context int, tok *nn.Embedding) error {
	ids := len(b.Tokens)
	if b.Tokens == nil && tok.Weight.Value.IsMeta() && len(b.Shape) == 2 {
		ids = b.Shape[0] * b.Shape[1]
	}
	if len(b.Shape) != 2 || b.Shape[0] < 1 || b.Shape[1] < 1 || b.Shape[0]*b.Shape[1] != ids {
		return fmt.Errorf("%s: tok takes Tokens shaped [B, T] (Shape, both at least 1, B·T tokens); the batch has %d tokens and Shape %v", model, len(b.Tokens), b.Shape)
	}
	if t := b.Shape[1]; t > context {
		return fmt.Errorf("%s: a sequence of %d tokens is longer than the context of %d", model, t, context)
	}
	return nil
}

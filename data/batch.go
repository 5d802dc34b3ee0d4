package data

import (
	"fmt"

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

// Share returns rank r's contiguous 1/n of the batch's rows (sequences for
// token batches); the rows must split evenly.
func (b Batch) Share(r, n int) (Batch, error) {
	rows := len(b.Targets)
	switch {
	case b.Shape != nil:
		rows = b.Shape[0]
	case b.X != nil:
		rows = b.X.Dim(0)
	}
	if rows%n != 0 {
		return Batch{}, fmt.Errorf("a batch of %d rows does not split evenly over %d ranks", rows, n)
	}
	per := rows / n
	var out Batch
	if b.X != nil {
		out.X = tensor.SliceRows(b.X, r*per, per)
	}
	// A batch of shapes alone (a plan's) has no ids to share.
	if b.Shape != nil {
		t := b.Shape[1]
		out.Shape = []int{per, t}
		if b.Tokens != nil {
			out.Tokens = b.Tokens[r*per*t : (r+1)*per*t]
			out.Targets = b.Targets[r*per*t : (r+1)*per*t]
		}
		return out, nil
	}
	if b.Targets != nil {
		out.Targets = b.Targets[r*per : (r+1)*per]
	}
	return out, nil
}
